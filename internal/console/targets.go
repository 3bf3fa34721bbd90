package console

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"
	"k8s.io/utils/lru"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// Target is where a pulled hub Application runs: its managed cluster, and its namespace and name there.
type Target struct {
	Cluster   string
	Namespace string
	Name      string
}

// Targets finds the Target of a hub Application; ok is false for an Application the hub's Argo CD runs itself
// (not pulled) and for one that does not exist.
type Targets interface {
	Target(ctx context.Context, namespace, name string) (t Target, ok bool, err error)
}

// TargetOf is the Target of a hub Application's metadata, as the pull model places it: the cluster of the
// ocm-managed-cluster annotation, the namespace of ocm-managed-cluster-app-namespace (else the hub's), the same
// name. ok is false for an Application that is not pulled.
func TargetOf(m metav1.Object) (Target, bool) {
	if m.GetLabels()[argocd.LabelPull] != "true" {
		return Target{}, false
	}
	cluster := strings.TrimSpace(m.GetAnnotations()[argocd.AnnotationManagedCluster])
	if cluster == "" {
		return Target{}, false
	}
	ns := m.GetNamespace()
	if v, ok := m.GetAnnotations()[argocd.AnnotationAppNamespace]; ok && strings.TrimSpace(v) != "" {
		ns = strings.TrimSpace(v)
	}
	return Target{Cluster: cluster, Namespace: ns, Name: m.GetName()}, true
}

// applicationsGVR is Argo CD's Applications.
var applicationsGVR = schema.GroupVersionResource{Group: argocd.Group, Version: argocd.Version, Resource: "applications"}

// hubTargets reads hub Applications' metadata (labels and annotations only) on demand, and holds what it
// read for ttl: only Applications someone looks at are read, and a page view's dozen requests read once.
type hubTargets struct {
	client metadata.Interface
	ttl    time.Duration

	mu    sync.Mutex
	cache *lru.Cache
}

type heldTarget struct {
	t    Target
	ok   bool
	read time.Time
}

// NewHubTargets returns Targets that read the hub's Applications with client, holding up to size of them for ttl.
func NewHubTargets(client metadata.Interface, size int, ttl time.Duration) Targets {
	return &hubTargets{client: client, ttl: ttl, cache: lru.New(size)}
}

func (h *hubTargets) Target(ctx context.Context, namespace, name string) (Target, bool, error) {
	key := namespace + "/" + name
	h.mu.Lock()
	v, found := h.cache.Get(key)
	h.mu.Unlock()
	if found && time.Since(v.(heldTarget).read) < h.ttl {
		return v.(heldTarget).t, v.(heldTarget).ok, nil
	}
	m, err := h.client.Resource(applicationsGVR).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	held := heldTarget{read: time.Now()}
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return Target{}, false, fmt.Errorf("get application %s: %w", key, err)
	default:
		held.t, held.ok = TargetOf(m)
	}
	h.mu.Lock()
	h.cache.Add(key, held)
	h.mu.Unlock()
	return held.t, held.ok, nil
}
