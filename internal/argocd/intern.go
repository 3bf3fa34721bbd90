package argocd

import "sync"

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
