package testutil

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/pagedlist"
)

// PullApplicationInformer is an informer of a hub's pull-model Applications, listed page by page, in the thin
// type whose status stays raw until Compact (a transform) reads it: what a test program watching thousands of
// Applications beside the fleet it measures can afford.
func PullApplicationInformer(cfg *rest.Config, scheme *runtime.Scheme) (toolscache.SharedIndexInformer, error) {
	return ApplicationInformer(cfg, scheme, labels.SelectorFromSet(labels.Set{argocd.LabelPull: "true"}))
}

// ApplicationInformer is PullApplicationInformer for the Applications the selector selects. Without the
// apiserver's watch cache, a watch with a label selector costs the apiserver a second decode of every update
// (the object before it, to tell whether it left the selection); a watcher that can afford every Application
// watches with labels.Everything() and filters itself.
func ApplicationInformer(cfg *rest.Config, scheme *runtime.Scheme, selector labels.Selector) (toolscache.SharedIndexInformer, error) {
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	listOptions := func(o metav1.ListOptions) *client.ListOptions {
		return &client.ListOptions{Raw: &o, LabelSelector: selector, Limit: o.Limit, Continue: o.Continue}
	}
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			list := &argocd.ApplicationList{}
			return list, c.List(ctx, list, listOptions(o))
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, &argocd.ApplicationList{}, listOptions(o))
		},
	}
	return pagedlist.NewSharedIndexInformer(lw, &argocd.Application{}, 0, toolscache.Indexers{}), nil
}
