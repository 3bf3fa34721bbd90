package pagedlist_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/pagedlist"
)

func TestOptions(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in, want metav1.ListOptions
	}{
		{"first list of a reflector", metav1.ListOptions{ResourceVersion: "0"}, metav1.ListOptions{Limit: 7}},
		{"relist from a resource version", metav1.ListOptions{ResourceVersion: "42", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan},
			metav1.ListOptions{Limit: 7}},
		{"next page", metav1.ListOptions{Limit: 7, Continue: "abc"}, metav1.ListOptions{Limit: 7, Continue: "abc"}},
		{"smaller limit", metav1.ListOptions{Limit: 3, LabelSelector: "a=b"}, metav1.ListOptions{Limit: 3, LabelSelector: "a=b"}},
		{"client-go's pager", metav1.ListOptions{Limit: 500, ResourceVersion: "0"}, metav1.ListOptions{Limit: 7}},
	} {
		if got := pagedlist.Options(tc.in, 7); got != tc.want {
			t.Errorf("%s: Options(%+v) = %+v, want %+v", tc.name, tc.in, got, tc.want)
		}
	}
}

// listCounter records the options of every list an informer makes.
type listCounter struct {
	*toolscache.ListWatch
	mu    sync.Mutex
	lists []metav1.ListOptions
	items []int
	// expireOnce fails the first request for a next page as expired.
	expireOnce bool
}

func (c *listCounter) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	c.mu.Lock()
	if c.expireOnce && o.Continue != "" {
		// What the apiserver answers when etcd compacted the revision the list reads at.
		c.expireOnce = false
		c.lists = append(c.lists, o)
		c.mu.Unlock()
		return nil, apierrors.NewResourceExpired("The provided continue parameter is too old")
	}
	c.mu.Unlock()
	obj, err := c.ListWatch.ListWithContext(ctx, o)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lists = append(c.lists, o)
	if l, ok := obj.(*corev1.ConfigMapList); ok {
		c.items = append(c.items, len(l.Items))
	}
	return obj, err
}

// TestInformerReadsPages runs an informer on a real apiserver: its first list, which client-go sends with
// resourceVersion "0" (answered whole by the watch cache, whatever the limit), arrives in pages.
func TestInformerReadsPages(t *testing.T) {
	const n = 230
	counter := configMaps(t, n)
	syncInformer(t, counter, n)
	counter.mu.Lock()
	defer counter.mu.Unlock()
	if len(counter.lists) < n/50 {
		t.Fatalf("%d list requests for %d objects with pages of 50: %+v", len(counter.lists), n, counter.lists)
	}
	for i, items := range counter.items {
		if items > 50 {
			t.Errorf("list %d returned %d objects, more than a page", i, items)
		}
	}
}

// TestExpiredPageListsAgain: when a next page's continue token has expired, the informer lists again from the
// start and holds every object. client-go's pager would fall back to one list without a limit, which the paged
// lister answers with a first page: the informer would hold one page.
func TestExpiredPageListsAgain(t *testing.T) {
	const n = 120
	counter := configMaps(t, n)
	counter.expireOnce = true
	syncInformer(t, counter, n)
	counter.mu.Lock()
	defer counter.mu.Unlock()
	if counter.expireOnce {
		t.Fatal("no list asked for a next page")
	}
}

// configMaps starts an apiserver with n config maps in "default" and returns a lister-watcher of them that
// records its lists.
func configMaps(t *testing.T, n int) *listCounter {
	t.Helper()
	if testing.Short() {
		t.Skip("starts an apiserver")
	}
	ctx := context.Background()
	env, err := loopback.Start(ctx, loopback.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Stop)
	cs := kubernetes.NewForConfigOrDie(env.Hub.Config())
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", i), Namespace: "default"}}
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return &listCounter{ListWatch: toolscache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "configmaps", "default", fields.Everything())}
}

// syncInformer runs an informer of lw with pages of 50 until it has synced, and checks that it holds at least
// n objects.
func syncInformer(t *testing.T, lw toolscache.ListerWatcher, n int) {
	t.Helper()
	inf := toolscache.NewSharedIndexInformer(pagedlist.ListerWatcher(lw, 50), &corev1.ConfigMap{}, 0, toolscache.Indexers{})
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go inf.Run(stop)
	syncCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !toolscache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	if got := len(inf.GetStore().ListKeys()); got < n {
		t.Errorf("the informer holds %d config maps, want at least %d", got, n)
	}
}

// TestTransformEachPage: an informer of NewSharedIndexInformer transforms each page of a list before it asks for
// the next one, so a list never holds more than a page of objects as the apiserver sent them, and it stores
// every object transformed.
func TestTransformEachPage(t *testing.T) {
	const n = 2*pagedlist.DefaultPageSize + 200
	var mu sync.Mutex
	transformed := 0
	var pagesAsked []int
	var lateTransforms []string
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
			first := 0
			if o.Continue != "" {
				if _, err := fmt.Sscan(o.Continue, &first); err != nil {
					return nil, err
				}
			}
			mu.Lock()
			pagesAsked = append(pagesAsked, first)
			if transformed < first {
				lateTransforms = append(lateTransforms, fmt.Sprintf("page at %d asked for with %d objects transformed", first, transformed))
			}
			mu.Unlock()
			list := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "7"}}
			for i := first; i < n && i < first+int(o.Limit); i++ {
				list.Items = append(list.Items, corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%04d", i), Namespace: "default"},
					Data: map[string]string{"payload": "what the transform drops"}})
			}
			if next := first + len(list.Items); next < n {
				list.Continue = fmt.Sprint(next)
			}
			return list, nil
		},
		WatchFuncWithContext: func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if o.SendInitialEvents != nil {
				return nil, apierrors.NewBadRequest("no streaming lists here") // the reflector lists instead
			}
			return watch.NewFake(), nil
		},
	}
	inf := pagedlist.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, toolscache.Indexers{})
	err := inf.SetTransform(func(obj any) (any, error) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok || cm.Data == nil {
			return obj, nil // transformed already
		}
		mu.Lock()
		transformed++
		mu.Unlock()
		cm.Data = nil
		return cm, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go inf.Run(stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(pagesAsked) != 3 || len(lateTransforms) > 0 {
		t.Errorf("pages asked for at %v; %v", pagesAsked, lateTransforms)
	}
	if transformed != n {
		t.Errorf("%d objects transformed, want %d", transformed, n)
	}
	items := inf.GetStore().List()
	if len(items) != n {
		t.Fatalf("the informer holds %d objects, want %d", len(items), n)
	}
	for _, obj := range items {
		if cm := obj.(*corev1.ConfigMap); cm.Data != nil {
			t.Fatalf("%s is stored as listed, not transformed", cm.Name)
		}
	}
}
