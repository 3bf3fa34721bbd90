package sim

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	grpcoptions "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc"

	"github.com/argocd-pull/argocd-pull/internal/application"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// TestDeletionsWhileAway: works deleted while the simulated clusters' agents were down are confirmed gone as
// soon as the agents are back. A restarted agent remembers nothing, and gets every deleting work at once from
// its resync; sdk-go's agent store hands each to the watch before it stores it, and a deletion handled before
// the work was stored was never confirmed (the server published it again every few minutes, with the same
// race). The chaos matrix found it: works of a killed simulator stayed deleting for minutes.
func TestDeletionsWhileAway(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	ctx := context.Background()
	s := startServer(t)
	h := grpcHub{startSource(t, s)}
	clusters := ClusterNames("away-", 1, 20)
	cfg := Config{
		Transport: workclient.TransportGRPC,
		GRPC:      &grpcoptions.GRPCOptions{Dialer: &grpcoptions.GRPCDialer{URL: s.AgentAddr()}},
		Clusters:  clusters,
		Argo:      testArgo(),
		Workers:   4,
	}
	first := startFleet(t, cfg)
	var works []delivered
	for _, c := range clusters {
		for i := range 10 {
			name := fmt.Sprintf("%s-app-%d", c, i)
			w, err := application.BuildWork(hubApplication(name, goodRepo, nil), application.BuildOptions{Cluster: c, SpokeArgoCDNamespace: "argocd"})
			if err != nil {
				t.Fatal(err)
			}
			if err := h.apply(ctx, w); err != nil {
				t.Fatal(err)
			}
			works = append(works, delivered{cluster: c, hub: name, work: w.Name})
		}
	}
	testutil.EventuallyWithin(t, time.Minute, "every work applied", func() error {
		for _, d := range works {
			got, err := hubStatus(ctx, h, d)
			if err != nil {
				return err
			}
			if !got.Applied {
				return fmt.Errorf("%s/%s is not applied", d.cluster, d.work)
			}
		}
		return nil
	})

	first.Stop()
	for _, d := range works {
		if err := h.delete(ctx, d.cluster, d.work); err != nil {
			t.Fatal(err)
		}
	}
	startFleet(t, cfg)
	// The server publishes undelivered specs again after two minutes; well before, every deletion is confirmed.
	testutil.EventuallyWithin(t, 30*time.Second, "every deletion confirmed by the restarted agents", func() error {
		left := 0
		for _, d := range works {
			if _, err := h.get(ctx, d.cluster, d.work); !apierrors.IsNotFound(err) {
				left++
			}
		}
		if left > 0 {
			return fmt.Errorf("%d of %d works still deleting", left, len(works))
		}
		return nil
	})
}
