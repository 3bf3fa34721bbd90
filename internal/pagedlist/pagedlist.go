// Package pagedlist makes informers read large collections page by page where the apiserver cannot stream them.
//
// client-go (0.35 on) asks for an informer's list as the first events of a watch, streamed from the apiserver's
// watch cache (WatchList, on by default from Kubernetes 1.34): no pages, no continue tokens, and the informer's
// transform applied to each object as it arrives. This package wraps only the list the informer falls back to
// when the apiserver refuses that (Kubernetes 1.33 by default); its watches pass through.
//
// client-go's reflector lists without a limit when it relists after its watch ended (so that the apiserver's
// watch cache can answer), and its first list asks for resourceVersion "0", for which the watch cache ignores
// the limit. Either way a collection of 150,000 Applications comes back as one response of hundreds of
// megabytes, which a busy apiserver does not finish within its request timeout: the informer then retries the
// same list every minute and never syncs again. A list through this package asks for the latest state
// (resourceVersion "", which the reflector accepts as it accepts any newer state), a page at a time, and hands
// the reflector the whole list.
//
// The pages are put together here, not by the reflector's own pager: when a page's continue token expires (etcd
// compacted the revision the list reads at, every five minutes by default), that pager falls back to one list
// without a limit, which this package would turn into a first page, and the reflector would replace its cache
// with that page alone. Here an expired token fails the list, and the reflector lists again from the start.
package pagedlist

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// DefaultPageSize is the page size of client-go's own pager.
const DefaultPageSize = 500

// ListerWatcher is lw whose lists ask for pages of at most size objects.
func ListerWatcher(lw toolscache.ListerWatcher, size int64) toolscache.ListerWatcher {
	return &paged{inner: toolscache.ToListerWatcherWithContext(lw), size: size}
}

// NewSharedIndexInformer is toolscache.NewSharedIndexInformer with paged lists of DefaultPageSize; it fits
// controller-runtime's cache.Options.NewInformer. The informer's transform (SetTransform) is applied to each
// page as it arrives, so a list holds every object transformed and one page as the apiserver sent it, not the
// whole collection as sent: at 150,000 Applications that is about 200 MB instead of more than a gigabyte.
// The informer applies its transform again when it stores the list, so the transform must be idempotent.
func NewSharedIndexInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	p := &paged{inner: toolscache.ToListerWatcherWithContext(lw), size: DefaultPageSize}
	return &informer{SharedIndexInformer: toolscache.NewSharedIndexInformer(p, obj, resync, indexers), lister: p}
}

// informer hands its transform to its lister.
type informer struct {
	toolscache.SharedIndexInformer
	lister *paged
}

func (i *informer) SetTransform(f toolscache.TransformFunc) error {
	if err := i.SharedIndexInformer.SetTransform(f); err != nil {
		return err
	}
	i.lister.setTransform(f)
	return nil
}

type paged struct {
	inner toolscache.ListerWatcherWithContext
	size  int64

	mu        sync.Mutex
	transform toolscache.TransformFunc
}

func (p *paged) setTransform(f toolscache.TransformFunc) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.transform = f
}

// Options turns a list's options into those of a page: the first page of the latest state, or the next page.
func Options(o metav1.ListOptions, size int64) metav1.ListOptions {
	if o.Limit == 0 || o.Limit > size {
		o.Limit = size
	}
	if o.Continue == "" {
		o.ResourceVersion, o.ResourceVersionMatch = "", ""
	}
	return o
}

// ListWithContext lists every page and returns them as one list at the first page's resource version, each
// object transformed. A page that fails (an expired continue token among others) fails the list.
func (p *paged) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	p.mu.Lock()
	transform := p.transform
	p.mu.Unlock()
	o = Options(o, p.size)
	list := &metainternalversion.List{}
	for page := 0; ; page++ {
		obj, err := p.inner.ListWithContext(ctx, o)
		if err != nil {
			return nil, err
		}
		m, err := meta.ListAccessor(obj)
		if err != nil {
			return nil, err
		}
		items, err := meta.ExtractListWithAlloc(obj)
		if err != nil {
			return nil, err
		}
		if page == 0 {
			list.ResourceVersion = m.GetResourceVersion()
			list.Items = make([]runtime.Object, 0, len(items)+int(ptr.Deref(m.GetRemainingItemCount(), 0)))
		}
		for _, item := range items {
			if transform != nil {
				t, err := transform(item)
				if err != nil {
					return nil, err
				}
				item = t.(runtime.Object)
			}
			list.Items = append(list.Items, item)
		}
		if m.GetContinue() == "" {
			return list, nil
		}
		o.Continue, o.ResourceVersion, o.ResourceVersionMatch = m.GetContinue(), "", ""
	}
}

func (p *paged) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	return p.inner.WatchWithContext(ctx, o)
}

// List and Watch are the context-free forms the ListerWatcher interface still requires.
func (p *paged) List(o metav1.ListOptions) (runtime.Object, error) {
	return p.ListWithContext(context.Background(), o)
}

func (p *paged) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return p.WatchWithContext(context.Background(), o)
}
