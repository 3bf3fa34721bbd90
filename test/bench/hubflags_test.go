package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/hubmanager"
	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

// TestWatchCacheServesEveryPage: with the flags the benchmark gives a hub apiserver that keeps its watch cache of
// Applications, every page of a list of them, as the controller's informer asks for it (its label selector, a
// page size), comes from the cache, the continued pages too; without ListFromCacheSnapshot those went to etcd.
func TestWatchCacheServesEveryPage(t *testing.T) {
	ctx := t.Context()
	const apps, pageSize = 7, 2
	cfg, c := hubWithApplications(t, apps)

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

// TestInformerStreamsItsList: with the flags the benchmark gives a hub apiserver that keeps its watch cache of
// Applications, an informer of Applications built as the controller's and the tracker's are (pagedlist, client-go's
// defaults) reads its list as the first events of one watch, streamed from the cache, and sends no LIST: a paged
// list has to end before the cache drops the snapshot it reads and etcd compacts its revision, which a relist of
// 150,000 Applications on a busy hub did not. The stream here outlasts the second of events the apiserver buffers
// for each watcher, with Applications written all the while, and still ends.
func TestInformerStreamsItsList(t *testing.T) {
	ctx := t.Context()
	const apps, perObject, writeEvery = 500, 10 * time.Millisecond, 20 * time.Millisecond
	cfg, c := hubWithApplications(t, apps)

	writing, stopWriting := context.WithCancel(ctx)
	defer stopWriting()
	var writes atomic.Int64
	go func() {
		tick := time.NewTicker(writeEvery)
		defer tick.Stop()
		for i := 0; writing.Err() == nil; i++ {
			<-tick.C
			app := argocd.NewApplication()
			app.SetNamespace(appsNamespace)
			app.SetName(fmt.Sprintf("cluster-%d-set-00", i%apps))
			patch := fmt.Sprintf(`{"metadata":{"annotations":{"write":"%d"}}}`, i)
			if c.Patch(writing, app, client.RawPatch(types.MergePatchType, []byte(patch))) == nil {
				writes.Add(1)
			}
		}
	}()

	before, err := hubRequests(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	inf, err := testutil.PullApplicationInformer(cfg, hubmanager.Scheme())
	if err != nil {
		t.Fatal(err)
	}
	// A slow reader: the stream takes apps×perObject at least.
	if err := inf.SetTransform(func(obj any) (any, error) { time.Sleep(perObject); return obj, nil }); err != nil {
		t.Fatal(err)
	}
	informerCtx, stop := context.WithCancel(ctx)
	defer stop()
	go inf.RunWithContext(informerCtx)
	syncCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	start := writes.Load()
	if !toolscache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
		t.Fatal("the informer did not sync within a minute")
	}
	during := writes.Load() - start
	stopWriting()
	after, err := hubRequests(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(inf.GetStore().ListKeys()); n != apps {
		t.Fatalf("the informer holds %d Applications, want %d", n, apps)
	}
	counts := after.sub(before)
	if lists := counts["LIST applications"]; lists != 0 {
		t.Errorf("the informer sent %.0f LIST requests of Applications, want none", lists)
	}
	if streamed := counts[streamedLists]; streamed != 1 {
		t.Errorf("the apiserver streamed %.0f lists of Applications as watches, want 1", streamed)
	}
	if during < 100 {
		t.Errorf("only %d Applications were written while the list streamed; the test wants more than a watcher's buffer of 100", during)
	}
}

// appsNamespace holds the Applications of hubWithApplications, named cluster-<i>-set-00.
const appsNamespace = "pages"

// hubWithApplications starts a hub apiserver with the benchmark's flags and creates n pull-model Applications.
func hubWithApplications(t *testing.T, n int) (*rest.Config, client.Client) {
	t.Helper()
	ctx := t.Context()
	env, err := loopback.Start(ctx, loopback.Options{HubAPIServerArgs: Scenario{}.hubAPIServerArgs()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Stop)
	cfg := env.Hub.Config()
	c, err := clientFor(cfg, 200, 400)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: appsNamespace}}); err != nil {
		t.Fatal(err)
	}
	set := &unstructured.Unstructured{}
	set.SetNamespace(appsNamespace)
	set.SetName("set-00")
	for i := range n {
		app := pullApplication(set, fmt.Sprintf("cluster-%d", i))
		app.SetOwnerReferences(nil)
		app.SetFinalizers(nil)
		if err := c.Create(ctx, app); err != nil {
			t.Fatal(err)
		}
	}
	return cfg, c
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
