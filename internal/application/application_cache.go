package application

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// AnnotationCachedStatusHash exists only on the controller's cached copy of an Application (the cache
// transform sets it and it is never written): the hash of the full status the hub holds.
const AnnotationCachedStatusHash = "argocd-pull.io/cached-status-hash"

// CacheOptions caches only pull-model Applications, and only what the controllers read of them: metadata
// without managedFields, spec, operation, and a compact status (sync, health, operation phase, conditions)
// with the hash of the full status. A full Application status can be tens of kilobytes; at 150,000
// Applications the cache would not fit in memory otherwise.
func CacheOptions() cache.ByObject {
	return cache.ByObject{
		Label:     labels.SelectorFromSet(labels.Set{argocd.LabelPull: "true"}),
		Transform: compactApplication,
	}
}

var _ toolscache.TransformFunc = compactApplication

func compactApplication(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	u.SetManagedFields(nil)
	status, _ := u.Object["status"].(map[string]any)
	hash, err := StatusHash(status)
	if err != nil {
		return nil, err
	}
	annotations := u.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[AnnotationCachedStatusHash] = hash
	u.SetAnnotations(annotations)
	if status != nil {
		u.Object["status"] = CompactStatus(status)
	}
	return u, nil
}

// CompactStatus keeps the parts of an Application status that the hub controllers read.
func CompactStatus(status map[string]any) map[string]any {
	out := map[string]any{}
	copyPath := func(path ...string) {
		if v, ok, _ := unstructured.NestedFieldNoCopy(status, path...); ok {
			_ = unstructured.SetNestedField(out, v, path...)
		}
	}
	copyPath("sync", "status")
	copyPath("sync", "revision")
	copyPath("health", "status")
	copyPath("health", "message")
	copyPath("operationState", "phase")
	copyPath("operationState", "startedAt")
	copyPath("operationState", "finishedAt")
	copyPath("operationState", "message")
	copyPath("conditions")
	return out
}
