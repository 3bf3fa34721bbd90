package application

import (
	"sync"
	"time"
)

// refreshWindow is how long after a refresh was handed to a managed cluster another one of the same kind is
// answered on the hub instead. argocd-server asks for a refresh on every page view that misses its cache and
// waits for the annotation to go; handing each one to the cluster would rewrite the work each time and make the
// cluster's Argo CD refresh over and over.
const refreshWindow = 3 * time.Second

// refreshes remembers the refreshes recently handed to managed clusters, per Application.
type refreshes struct {
	mu        sync.Mutex
	entries   map[string]handedRefresh
	lastSweep time.Time
}

type handedRefresh struct {
	hard bool
	at   time.Time
}

// handedOff records that the Application key's refresh (hard or not) was handed to its cluster at now.
func (r *refreshes) handedOff(key string, hard bool, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.entries == nil {
		r.entries = map[string]handedRefresh{}
	}
	if now.Sub(r.lastSweep) > refreshWindow {
		for k, e := range r.entries {
			if now.Sub(e.at) > refreshWindow {
				delete(r.entries, k)
			}
		}
		r.lastSweep = now
	}
	r.entries[key] = handedRefresh{hard: hard, at: now}
}

// covered reports whether a refresh asked for now is covered by one handed off within refreshWindow: a
// normal refresh by any, a hard refresh only by a hard one.
func (r *refreshes) covered(key string, hard bool, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[key]
	return ok && now.Sub(e.at) <= refreshWindow && (e.hard || !hard)
}
