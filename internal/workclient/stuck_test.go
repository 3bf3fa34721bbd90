package workclient_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/argocd-pull/argocd-pull/internal/reconnect"
	"github.com/argocd-pull/argocd-pull/internal/server/servertest"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
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

// TestLostFirstStatusResynced: a work whose agent's first status the transport never stored gets it from the
// periodic resync of its cluster. A second transport with the same source ID stands for a publish whose answer
// was lost: it creates the work on the server, the agent applies it and reports, and the first transport keeps
// that status for a work it has not stored. Once the kept status is gone (its time to live), the first transport
// creates the work itself, as a retried publish does: the server takes the identical create as the resource it
// has and sends the agent nothing, so no status follows, and the transport stores the work without one.
func TestLostFirstStatusResynced(t *testing.T) {
	ctx := context.Background()
	s := startServer(t, "cluster1")
	startAgent(t, s, "cluster1")
	g, _ := startTransportWith(t, ctx, s.SourceAddr(), s.HTTPAddr(), func(o *workclient.GRPCOptions) { o.ResyncPeriod = time.Second })
	testutil.Eventually(t, "the transport to list the works", func() error {
		if !g.Informer().HasSynced() {
			return errors.New("not synced")
		}
		return nil
	})
	other, _ := startTransport(t, s)
	if err := other.Apply(ctx, pullWork("cluster1", "w", "v1")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the work applied", func() error { return appliedAt(other, "cluster1", "w", 1) })
	testutil.Eventually(t, "the first transport to keep the status of a work it has not stored", func() error {
		if n := workclient.EarlyStatuses(g); n != 1 {
			return fmt.Errorf("%d statuses kept", n)
		}
		return nil
	})
	workclient.ForgetEarlyStatuses(g)
	if err := g.Apply(ctx, pullWork("cluster1", "w", "v1")); err != nil {
		t.Fatal(err)
	}
	if err := appliedAt(g, "cluster1", "w", 1); err == nil {
		t.Fatal("the work was stored with its status; the test no longer loses it")
	}
	testutil.EventuallyWithin(t, 10*time.Second, "the lost status resynced", func() error { return appliedAt(g, "cluster1", "w", 1) })
}

// TestStuckBackoff: a cluster that stays stuck is resynced after 1, 2, 4, … ticks up to the maximum, again at
// the next tick after a failed resync, and from one tick again once it was no longer stuck.
func TestStuckBackoff(t *testing.T) {
	b := workclient.NewStuckBackoff(4)
	var resynced []int
	for tick := 1; tick <= 16; tick++ {
		if slices.Equal(b.Due([]string{"c1"}), []string{"c1"}) {
			resynced = append(resynced, tick)
		}
	}
	if want := []int{1, 2, 4, 8, 12, 16}; !slices.Equal(resynced, want) {
		t.Fatalf("resynced at ticks %v, want %v", resynced, want)
	}
	b.Due([]string{"c1"}) // tick 17: waits
	b.Retry("c1")
	if got := b.Due([]string{"c1"}); !slices.Equal(got, []string{"c1"}) {
		t.Fatalf("after a failed resync, due %v, want c1", got)
	}
	b.Due(nil)
	if got := b.Due([]string{"c1", "c2"}); !slices.Equal(got, []string{"c1", "c2"}) {
		t.Fatalf("once no longer stuck, due %v, want c1 and c2", got)
	}
}
