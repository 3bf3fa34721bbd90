package application

import "sync"

// goneApplications are the keys of Applications the cache saw deleted (a delete event of an object with a
// deletion timestamp) that carried no argocd-pull finalizer: their next reconcile only deletes their works,
// without reading the hub. A reconcile that finds the key in the cache again (re-created) drops it.
type goneApplications struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

func (g *goneApplications) add(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.keys == nil {
		g.keys = map[string]struct{}{}
	}
	g.keys[key] = struct{}{}
}

// take reports whether key was gone, and forgets it.
func (g *goneApplications) take(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.keys[key]
	delete(g.keys, key)
	return ok
}
