package sim

import (
	"context"
	"errors"
	"testing"
	"time"

	grpcoptions "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc"

	"github.com/argocd-pull/argocd-pull/internal/application"
	"github.com/argocd-pull/argocd-pull/internal/reconnect"
	"github.com/argocd-pull/argocd-pull/internal/server/servertest"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// TestStuckClientRestarted: a simulated cluster whose agent client sdk-go left on a closed connection (a
// connection that failed right after a reconnect, its report dropped) gets a new client after
// reconnect.StuckAfter and syncs what it is sent. The test holds the client's reconnect loop, as a busy machine
// can, to force the race.
//
// Its sdk-go client reconnects in this process, and sdk-go v1.3.0 races with itself on reconnection
// (docs/server.md): a -race build skips it, and `make test` runs it again without -race.
func TestStuckClientRestarted(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	if testutil.RaceEnabled {
		t.Skip("sdk-go's client reconnects in this process; make test runs this test without -race")
	}
	ctx := context.Background()
	o := servertest.Options(servertest.NewDatabase(t, postgres(t)))
	o.SourceAddress, o.AgentAddress, o.HTTPAddress = servertest.FreeAddresses(t)
	o.AutoRegisterConsumers = true
	s := servertest.Run(t, o)
	h := grpcHub{startSource(t, s)}

	f, err := NewFleet(Config{
		Transport: workclient.TransportGRPC,
		GRPC:      &grpcoptions.GRPCOptions{Dialer: &grpcoptions.GRPCDialer{URL: s.AgentAddr()}},
		Clusters:  []string{"stuck-1"},
		Argo:      testArgo(),
		Workers:   1,
	})
	if err != nil {
		t.Fatal(err)
	}
	stalled, stall := testutil.StallReconnects(ctx, 5*time.Second)
	if err := f.Start(stalled); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)

	s.Stop()
	stall.Forced(t)
	servertest.Run(t, o)
	w, err := application.BuildWork(hubApplication("stuck-1-app", goodRepo, nil), application.BuildOptions{Cluster: "stuck-1", SpokeArgoCDNamespace: "argocd"})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the work published", func() error { return h.apply(ctx, w) })
	d := delivered{cluster: "stuck-1", hub: "stuck-1-app", work: w.Name}
	testutil.EventuallyWithin(t, reconnect.StuckAfter+30*time.Second, "the work synced by a new client", func() error {
		got, err := hubStatus(ctx, h, d)
		if err != nil {
			return err
		}
		if !got.Applied {
			return errors.New("not applied")
		}
		return nil
	})
}
