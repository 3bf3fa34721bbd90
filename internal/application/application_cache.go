package application

import (
	"strings"
	"sync"

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

// CompactStatus keeps the parts of an Application status that the hub controllers read: sync, health,
// operation phase and times, conditions, and the identities of the resources the Application deploys.
//
// The resources are kept as one string in status.resourceRefs, not as Argo CD's list: one line
// "group/version/kind/namespace/name" per resource (no per-resource status), at most MaxCachedResources of
// them, with status.resourceCount holding the full count when the list was cut. The string is interned, so
// the thousands of Applications an ApplicationSet generates, which deploy the same resources, share one copy:
// a list of maps would cost about half a kilobyte per resource per Application. Read it with CachedResources.
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
	if resources, ok := status["resources"].([]any); ok {
		refs, count := compactResources(resources)
		if refs != "" {
			out[compactResourcesKey] = refs
		}
		if count > MaxCachedResources {
			out[compactResourceCountKey] = int64(count)
		}
	}
	return out
}

// Resource identities in the compact status of a cached Application.
const (
	// MaxCachedResources is the number of resources of one Application the cache keeps.
	MaxCachedResources = 100

	compactResourcesKey     = "resourceRefs"
	compactResourceCountKey = "resourceCount"
)

// ResourceRef identifies a resource an Application deploys, as the Application's status.resources names it.
type ResourceRef struct {
	Group, Version, Kind, Namespace, Name string
}

// compactResources encodes the identities of the first MaxCachedResources entries of status.resources as one
// interned string, and returns it with the number of well-formed entries.
func compactResources(resources []any) (string, int) {
	var b strings.Builder
	count := 0
	for _, r := range resources {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		ref := ResourceRef{Group: str(m["group"]), Version: str(m["version"]), Kind: str(m["kind"]),
			Namespace: str(m["namespace"]), Name: str(m["name"])}
		if ref.Kind == "" || ref.Name == "" {
			continue
		}
		count++
		if count > MaxCachedResources {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(ref.Group + "/" + ref.Version + "/" + ref.Kind + "/" + ref.Namespace + "/" + ref.Name)
	}
	return interned.intern(b.String()), count
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// CachedResources returns the resources a cached Application deploys, as CompactStatus kept them, and how
// many its status listed (more than returned when the list was cut).
func CachedResources(app *unstructured.Unstructured) ([]ResourceRef, int) {
	refs, _, _ := unstructured.NestedString(app.Object, "status", compactResourcesKey)
	out := ParseResourceRefs(refs)
	count, ok, _ := unstructured.NestedInt64(app.Object, "status", compactResourceCountKey)
	if !ok || int(count) < len(out) {
		count = int64(len(out))
	}
	return out, int(count)
}

// CachedResourceRefs returns the encoded resource identities of a cached Application (see CompactStatus;
// Applications that deploy the same resources return the same string, to decode with ParseResourceRefs), and
// the number of resources its status listed when the cache kept only the first MaxCachedResources (0 when it
// kept them all).
func CachedResourceRefs(app *unstructured.Unstructured) (string, int) {
	status, _ := app.Object["status"].(map[string]any)
	refs, _ := status[compactResourcesKey].(string)
	count, _ := status[compactResourceCountKey].(int64)
	return refs, int(count)
}

// ParseResourceRefs decodes the resource identities CachedResourceRefs returns.
func ParseResourceRefs(refs string) []ResourceRef {
	if refs == "" {
		return nil
	}
	lines := strings.Split(refs, "\n")
	out := make([]ResourceRef, 0, len(lines))
	for _, line := range lines {
		f := strings.SplitN(line, "/", 5)
		if len(f) != 5 {
			continue
		}
		out = append(out, ResourceRef{Group: f[0], Version: f[1], Kind: f[2], Namespace: f[3], Name: f[4]})
	}
	return out
}

// internTable deduplicates strings. It is bounded: when it holds maxEntries strings or maxBytes bytes it
// starts over; the strings it handed out stay valid, they are only no longer shared with later ones.
type internTable struct {
	mu         sync.Mutex
	m          map[string]string
	bytes      int
	maxEntries int
	maxBytes   int
}

var interned = &internTable{maxEntries: 1 << 16, maxBytes: 32 << 20}

func (t *internTable) intern(s string) string {
	if s == "" {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.m[s]; ok {
		return v
	}
	if t.m == nil || len(t.m) >= t.maxEntries || t.bytes+len(s) > t.maxBytes {
		t.m, t.bytes = map[string]string{}, 0
	}
	t.m[s] = s
	t.bytes += len(s)
	return s
}
