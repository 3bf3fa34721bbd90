package application

import (
	"sync"
	"time"
)

// expectationTTL bounds how long a write is trusted over the cache: long enough for the cache to catch up,
// short enough that a work removed behind argocd-pull's back is soon written again.
const expectationTTL = 30 * time.Second

// expectations remembers the spec hash of works just written, so that a reconcile that runs before the cache
// has seen the write does not write the same work again.
type expectations struct {
	mu      sync.Mutex
	entries map[string]expectation
}

type expectation struct {
	hash string
	at   time.Time
}

// written records that the work key now carries hash.
func (e *expectations) written(key, hash string, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.entries == nil {
		e.entries = map[string]expectation{}
	}
	e.entries[key] = expectation{hash: hash, at: now}
}

// satisfied reports whether the work key is known to carry hash: the cache shows it, or it was written
// recently. An entry the cache has caught up with, or that is too old, is forgotten.
func (e *expectations) satisfied(key, cachedHash, hash string, now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	exp, ok := e.entries[key]
	if ok && (exp.hash == cachedHash || now.Sub(exp.at) > expectationTTL) {
		delete(e.entries, key)
		ok = false
	}
	return cachedHash == hash || (ok && exp.hash == hash)
}
