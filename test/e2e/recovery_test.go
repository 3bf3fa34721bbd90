package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/localfleet"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// recoveryBound is how long after the last killed process is back every hub Application must show its
// cluster's current status. The target is 10 s; the bound is generous for a loaded test machine, and a
// recovery that took minutes (sdk-go's default reconnect backoff) fails it all the same.
const recoveryBound = 30 * time.Second

// settle is how long a recovered fleet is watched once its hub statuses are current: longer than the work agent's
// longest status sync interval (10 s with a jitter of up to 90%).
const settle = 20 * time.Second

// appsPerCluster is the number of hub Applications per managed cluster.
const appsPerCluster = 10

// TestRecovery kills processes of a Maestro-mode fleet (SIGKILL), changes every managed cluster's Application
// statuses while they are down (as Argo CD there would), starts them again, in both orders for two, and
// checks that every hub Application shows its cluster's current status within recoveryBound of the last
// process being back; the time it took is logged. An agent restart with no status change must end with the
// full status on the hub too (the agent reports each work first without feedback, then with it).
func TestRecovery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	clusters := []string{"cluster1", "cluster2"}
	f := startFleet(t, localfleet.Options{Clusters: clusters, Transport: workclient.TransportGRPC})
	hub := must[client.Client](t)(f.HubClient())
	spokes := map[string]client.Client{}
	for _, c := range clusters {
		spokes[c] = must[client.Client](t)(f.ClusterClient(c))
		if err := spokes[c].Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: localfleet.ArgoCDNamespace}}); err != nil {
			t.Fatal(err)
		}
		for i := range appsPerCluster {
			if err := hub.Create(ctx, recoveryApp(c, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	testutil.EventuallyWithin(t, 2*time.Minute, "every Application on its managed cluster", func() error {
		for _, c := range clusters {
			for i := range appsPerCluster {
				if err := get(ctx, spokes[c], argocd.NewApplication(), localfleet.ArgoCDNamespace, appName(c, i)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	revision := 0
	setStatuses := func() {
		revision++
		for _, c := range clusters {
			for i := range appsPerCluster {
				writeSpokeStatus(t, spokes[c], appName(c, i), map[string]any{
					"sync":   map[string]any{"status": "Synced", "revision": fmt.Sprintf("r%d", revision)},
					"health": map[string]any{"status": "Healthy"},
				})
			}
		}
	}
	setStatuses()
	testutil.EventuallyWithin(t, 2*time.Minute, "every status on the hub", func() error { return hubShows(ctx, hub, clusters, revision) })

	agent1 := localfleet.ComponentAgent("cluster1")
	for _, tc := range []struct {
		name          string
		kill, restart []string
		// same keeps the managed clusters' statuses while the processes are down.
		same bool
	}{
		{name: "agent, status unchanged", kill: []string{agent1}, restart: []string{agent1}, same: true},
		{name: "agent", kill: []string{agent1}, restart: []string{agent1}},
		{name: "server", kill: []string{localfleet.ComponentServer}, restart: []string{localfleet.ComponentServer}},
		{name: "postgres", kill: []string{localfleet.ComponentPostgres}, restart: []string{localfleet.ComponentPostgres}},
		{name: "controller before server", kill: []string{localfleet.ComponentServer, localfleet.ComponentController},
			restart: []string{localfleet.ComponentController, localfleet.ComponentServer}},
		{name: "server before postgres", kill: []string{localfleet.ComponentPostgres, localfleet.ComponentServer},
			restart: []string{localfleet.ComponentServer, localfleet.ComponentPostgres}},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			for _, c := range tc.kill {
				if err := f.Kill(c); err != nil {
					t.Fatal(err)
				}
			}
			if !tc.same {
				setStatuses()
			}
			for _, c := range tc.restart {
				if err := f.Restart(ctx, c); err != nil {
					t.Fatal(err)
				}
			}
			back := time.Now()
			testutil.EventuallyWithin(t, 3*time.Minute, "every hub Application with its cluster's current status", func() error {
				return hubShows(ctx, hub, clusters, revision)
			})
			took := time.Since(back)
			t.Logf("%s: every hub Application current %.1fs after the last process was back", tc.name, took.Seconds())
			if took > recoveryBound {
				t.Errorf("recovery took %s, more than %s", took.Round(100*time.Millisecond), recoveryBound)
			}
			for _, c := range tc.restart {
				if err := f.WaitReady(ctx, c); err != nil {
					t.Fatal(err)
				}
			}
			// Once current, the hub stays so while every agent reports at least once more (its status sync runs
			// every 10 to 19 s): no status reported on the way (a restarted agent's first report of a work has no
			// feedback) shows on the hub, not even for a moment.
			if err := stayCurrent(ctx, hub, clusters, revision, settle); err != nil {
				t.Fatalf("after the recovery: %v", err)
			}
		})
	}
}

func appName(cluster string, i int) string { return fmt.Sprintf("%s-app-%02d", cluster, i) }

func recoveryApp(cluster string, i int) client.Object {
	app := argocd.NewApplication()
	app.SetNamespace(localfleet.ArgoCDNamespace)
	app.SetName(appName(cluster, i))
	app.SetLabels(map[string]string{argocd.LabelPull: "true"})
	app.SetAnnotations(map[string]string{
		argocd.AnnotationManagedCluster: cluster,
		argocd.AnnotationAppNamespace:   localfleet.ArgoCDNamespace,
		argocd.AnnotationSkipReconcile:  "true",
	})
	app.Object["spec"] = map[string]any{
		"project":     "default",
		"source":      map[string]any{"repoURL": "http://git.example/repo.git", "path": "guestbook", "targetRevision": "HEAD"},
		"destination": map[string]any{"name": cluster, "namespace": "guestbook"},
	}
	return app
}

// hubShows returns an error naming the hub Applications that do not show revision r<revision>, Synced and Healthy.
func hubShows(ctx context.Context, hub client.Client, clusters []string, revision int) error {
	want := fmt.Sprintf("r%d", revision)
	var wrong []string
	for _, c := range clusters {
		for i := range appsPerCluster {
			app := argocd.NewApplication()
			if err := get(ctx, hub, app, localfleet.ArgoCDNamespace, appName(c, i)); err != nil {
				return err
			}
			if nested(app, "status", "sync", "revision") != want || nested(app, "status", "sync", "status") != "Synced" ||
				nested(app, "status", "health", "status") != "Healthy" {
				wrong = append(wrong, fmt.Sprintf("%s (%v)", app.GetName(), app.Object["status"]))
			}
		}
	}
	if len(wrong) > 0 {
		return fmt.Errorf("%d of %d hub Applications not at %s: %s", len(wrong), len(clusters)*appsPerCluster, want,
			strings.Join(wrong[:min(len(wrong), 3)], ", "))
	}
	return nil
}

// stayCurrent checks every quarter second for d that the hub Applications show revision r<revision>, Synced and
// Healthy, and returns the first error.
func stayCurrent(ctx context.Context, hub client.Client, clusters []string, revision int, d time.Duration) error {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		if err := hubShows(ctx, hub, clusters, revision); err != nil {
			return err
		}
	}
	return nil
}
