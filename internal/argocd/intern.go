package argocd

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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

// Intern returns a string equal to s that is shared with earlier strings equal to it, so that the many copies
// of a string that repeats across cached objects (a label key, a condition reason) take its bytes once.
func Intern(s string) string { return interned.intern(s) }

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

// InternShort interns a string that may be one object's own only when it is short, so that long unique values
// do not fill the table.
func InternShort(s string) string {
	if len(s) > 64 {
		return s
	}
	return interned.intern(s)
}

// InternMetadata shares the strings of an object's metadata that repeat from object to object: its namespace,
// label and annotation keys, short label and annotation values, finalizers, and its owners' kinds and names.
// A controller that caches 150,000 objects keeps each of them once.
func InternMetadata(m *metav1.ObjectMeta) {
	m.Namespace = interned.intern(m.Namespace)
	for _, set := range []map[string]string{m.Labels, m.Annotations} {
		for k, v := range set {
			set[interned.intern(k)] = InternShort(v)
		}
	}
	for i, f := range m.Finalizers {
		m.Finalizers[i] = interned.intern(f)
	}
	for i := range m.OwnerReferences {
		o := &m.OwnerReferences[i]
		o.APIVersion, o.Kind, o.Name = interned.intern(o.APIVersion), interned.intern(o.Kind), interned.intern(o.Name)
	}
}
