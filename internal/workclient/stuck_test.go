package workclient_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/argocd-pull/argocd-pull/internal/reconnect"
	"github.com/argocd-pull/argocd-pull/internal/server/servertest"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

// TestUnreportedClosedConnection: the controller's source client recovers when sdk-go's transport closed a
// failed connection without telling the client's reconnect loop. Without the guard the client subscribes and
// publishes on the closed connection for ever ("the client connection is closing").
func TestUnreportedClosedConnection(t *testing.T) {
	if testutil.RaceEnabled {
		t.Skip("sdk-go's clients reconnect in this process; make test runs this test without -race")
	}
	ctx := context.Background()
	addrs := freeAddrs(t)
	db := servertest.NewDatabase(t, pg)
	s := startServerAt(t, db, addrs, "cluster1")
	startAgent(t, s, "cluster1")
	stalled, sink := testutil.StallReconnects(ctx, 5*time.Second)
	g, _ := startTransportWith(t, stalled, addrs.source, addrs.http)
	testutil.Eventually(t, "the transport to list the works", func() error {
		if !g.Informer().HasSynced() {
			return errors.New("not synced")
		}
		return nil
	})

	s.Stop()
	sink.Forced(t)
	startServerAt(t, db, addrs)
	testutil.Eventually(t, "the transport to be ready again", func() error { return g.Ready(ctx) })
	testutil.Eventually(t, "a work published", func() error { return g.Apply(ctx, pullWork("cluster1", "w", "v1")) })
	testutil.Eventually(t, "the work applied, its status back through the subscription", func() error {
		return appliedAt(g, "cluster1", "w", 1)
	})
}

// TestStuckAgentClientRestarted: an agent client that sdk-go left on a closed connection is restarted after
// reconnect.StuckAfter, as the work agent and the simulator restart theirs, and receives its works.
func TestStuckAgentClientRestarted(t *testing.T) {
	if testutil.RaceEnabled {
		t.Skip("sdk-go's clients reconnect in this process; make test runs this test without -race")
	}
	ctx := context.Background()
	addrs := freeAddrs(t)
	stalled, sink := testutil.StallReconnects(ctx, 3*time.Second)
	stalled, cancel := context.WithCancel(stalled)
	t.Cleanup(cancel)
	a := startAgentAt(t, stalled, addrs.agent, "cluster1")
	sink.Forced(t)

	s := startServerAt(t, servertest.NewDatabase(t, pg), addrs, "cluster1")
	g, _ := startTransport(t, s)
	if err := g.Apply(ctx, pullWork("cluster1", "w", "v1")); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, reconnect.StuckAfter+30*time.Second, "the stuck agent client to receive the work", func() error {
		if got := a.generation("w"); got != 1 {
			return fmt.Errorf("work w received at generation %d", got)
		}
		return nil
	})
	if n := a.runs.Load(); n != 2 {
		t.Fatalf("the agent client was started %d times, want 2 (one restart)", n)
	}
	cancel()
	if err := <-a.stopped; err != nil {
		t.Fatal(err)
	}
}
