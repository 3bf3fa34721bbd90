package application

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/resourceversion"
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

// statusExpectations remembers the status this controller last wrote to each Application until the cache shows
// that write. The cache can lag the controller's own writes: compared with the cache alone, a status that
// changes and changes back before the cache has caught up (a restarted work agent reports every work without
// feedback, then with it) looks as if it were on the hub already, and the intermediate status the controller
// wrote just before would stay there. Entries live only while a write is in flight: the event that shows the
// write to the cache, or the next reconcile after it, removes them.
type statusExpectations struct {
	mu      sync.Mutex
	entries map[string]statusWrite
}

type statusWrite struct {
	hash string
	// resourceVersion is the Application's version the write produced; empty while the write is under way.
	resourceVersion string
	// seen is the last version the cache received while the write was under way: its event can come first.
	seen string
	at   time.Time
}

// writing records that a write of the status hash to the Application key is about to be sent.
func (e *statusExpectations) writing(key, hash string, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.entries == nil {
		e.entries = map[string]statusWrite{}
	}
	e.entries[key] = statusWrite{hash: hash, at: now}
}

// written records the version of the Application that the write produced.
func (e *statusExpectations) written(key, resourceVersion string, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	w, ok := e.entries[key]
	if !ok {
		return
	}
	w.resourceVersion = resourceVersion
	if w.seen != "" && w.caughtUp(w.seen, now) {
		delete(e.entries, key)
		return
	}
	e.entries[key] = w
}

// forget drops what is remembered of the Application key: its write failed, or it was deleted.
func (e *statusExpectations) forget(key string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.entries, key)
}

// known returns the hash of the status the Application key has on the hub, given its cached version: the
// status written last while the cache has not caught up with that write, the cached status otherwise.
func (e *statusExpectations) known(key, cachedVersion, cachedHash string, now time.Time) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	w, ok := e.entries[key]
	if !ok || w.resourceVersion == "" {
		return cachedHash
	}
	if w.caughtUp(cachedVersion, now) {
		delete(e.entries, key)
		return cachedHash
	}
	return w.hash
}

// observed is told of every version of an Application the cache receives. It forgets a write the cache has
// caught up with, and reports whether the version carries the status this controller wrote last (an update
// the controller made itself, with nothing left to reconcile).
func (e *statusExpectations) observed(key, version, hash string, now time.Time) (own bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	w, ok := e.entries[key]
	if !ok {
		return false
	}
	switch {
	case w.resourceVersion == "":
		w.seen = version
		e.entries[key] = w
	case w.caughtUp(version, now):
		delete(e.entries, key)
	}
	return w.hash == hash
}

// caughtUp reports whether a cached version of the Application includes the write. Resource versions of one
// resource are ordered (apimachinery's CompareResourceVersion); where a server's are not, only the very
// version the write produced counts, and the write is trusted for expectationTTL.
func (w statusWrite) caughtUp(version string, now time.Time) bool {
	if cmp, err := resourceversion.CompareResourceVersion(version, w.resourceVersion); err == nil {
		return cmp >= 0
	}
	return version == w.resourceVersion || now.Sub(w.at) > expectationTTL
}
