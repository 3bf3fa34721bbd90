package application

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// CacheOptions caches only pull-model Applications, as argocd.Application: typed metadata without
// managedFields (and with the strings that repeat from Application to Application shared), spec and operation
// as raw JSON, and a summary of the status (with the hash of the whole one) instead of the status. A full Application status can be tens of kilobytes, and a decoded unstructured
// Application several kilobytes more; at 150,000 Applications the cache would not fit in memory otherwise.
func CacheOptions() cache.ByObject {
	return cache.ByObject{
		Label:     labels.SelectorFromSet(labels.Set{argocd.LabelPull: "true"}),
		Transform: compactApplication,
	}
}

var _ toolscache.TransformFunc = compactApplication

func compactApplication(obj any) (any, error) {
	app, ok := obj.(*argocd.Application)
	if !ok {
		return obj, nil
	}
	app.ManagedFields = nil
	argocd.InternMetadata(&app.ObjectMeta)
	if err := app.Compact(); err != nil {
		return nil, err
	}
	return app, nil
}

// AddIndexers adds indexers to the cache's informer of Applications and returns its indexer. An index on the
// informer keeps one key per value and a lookup returns the cached Applications themselves, where
// controller-runtime's field indexes keep each value twice (for its namespace and for all namespaces) and a
// List through them copies each Application found.
func AddIndexers(ctx context.Context, c cache.Cache, indexers toolscache.Indexers) (toolscache.Indexer, error) {
	return addInformerIndexers(ctx, c, &argocd.Application{}, indexers)
}

// addInformerIndexers adds indexers to the cache's informer of obj's kind and returns its indexer; see AddIndexers.
func addInformerIndexers(ctx context.Context, c cache.Cache, obj client.Object, indexers toolscache.Indexers) (toolscache.Indexer, error) {
	inf, err := c.GetInformer(ctx, obj)
	if err != nil {
		return nil, err
	}
	shared, ok := inf.(toolscache.SharedIndexInformer)
	if !ok {
		return nil, fmt.Errorf("the cache's informer of %T is a %T, not a SharedIndexInformer", obj, inf)
	}
	if err := shared.AddIndexers(indexers); err != nil {
		return nil, err
	}
	return shared.GetIndexer(), nil
}
