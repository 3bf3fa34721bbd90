package main

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/loopback"
)

// TestWatchCacheServesEveryPage: with the flags the benchmark gives a hub apiserver that keeps its watch cache of
// Applications, every page of a list of them, as the controller's informer asks for it (its label selector, a
// page size), comes from the cache, the continued pages too; without listFromCacheSnapshot those went to etcd.
func TestWatchCacheServesEveryPage(t *testing.T) {
	ctx := t.Context()
	env, err := loopback.Start(ctx, loopback.Options{HubAPIServerArgs: Scenario{}.hubAPIServerArgs()})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Stop()
	cfg := env.Hub.Config()
	c, err := clientFor(cfg, 50, 100)
	if err != nil {
		t.Fatal(err)
	}
	const namespace, apps, pageSize = "pages", 7, 2
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		t.Fatal(err)
	}
	set := &unstructured.Unstructured{}
	set.SetNamespace(namespace)
	set.SetName("set-00")
	for i := range apps {
		app := pullApplication(set, fmt.Sprintf("cluster-%d", i))
		app.SetOwnerReferences(nil)
		app.SetFinalizers(nil)
		if err := c.Create(ctx, app); err != nil {
			t.Fatal(err)
		}
	}

	before := applicationLists(ctx, t, cfg)
	list := argocd.NewApplicationList()
	pages, items := 0, 0
	for {
		err := c.List(ctx, list, client.MatchingLabels{argocd.LabelPull: "true"}, client.Limit(pageSize), client.Continue(list.GetContinue()))
		if err != nil {
			t.Fatal(err)
		}
		pages, items = pages+1, items+len(list.Items)
		if list.GetContinue() == "" {
			break
		}
	}
	after := applicationLists(ctx, t, cfg)
	if items != apps || pages != (apps+pageSize-1)/pageSize {
		t.Fatalf("listed %d Applications in %d pages, want %d in %d", items, pages, apps, (apps+pageSize-1)/pageSize)
	}
	if fromCache := after.cache - before.cache; fromCache != float64(pages) {
		t.Errorf("%.0f of %d pages from the watch cache", fromCache, pages)
	}
	// A consistent first page reads etcd's current revision (a list of one key), and nothing else.
	if fromEtcd := after.storage - before.storage; fromEtcd > 1 {
		t.Errorf("%.0f lists of Applications from etcd for %d pages", fromEtcd, pages)
	}
}

// listCounts are the hub apiserver's lists of Applications served from its watch cache and from etcd.
type listCounts struct{ cache, storage float64 }

func applicationLists(ctx context.Context, t *testing.T, cfg *rest.Config) listCounts {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var n listCounts
	err = scrapeMetrics(ctx, hc, cfg.Host+"/metrics", func(name, labels string, v float64) {
		switch {
		case name == "apiserver_cache_list_total" && label(labels, "resource_prefix") == "/argoproj.io/applications":
			n.cache += v
		case name == "apiserver_storage_list_total" && label(labels, "resource") == "applications.argoproj.io":
			n.storage += v
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
