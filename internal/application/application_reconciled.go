package application

import (
	"sync"
	"time"
)

// operationSettle is how long the hub waits, from the first status that shows an operation's end, for the
// managed cluster's comparison after that end. Argo CD compares an Application again as soon as an operation
// ends; until then its status shows the comparison from before the operation (OutOfSync, say, although the sync
// succeeded). A comparison that finds what the earlier one found changes nothing in the status, so nothing
// comes back to tell the hub it happened: after operationSettle the hub takes it as done.
const operationSettle = 5 * time.Second

// operationEnds remembers, per Application, the first status that showed the end of its last operation, until
// the hub's cached status shows the managed cluster's comparison after that end.
type operationEnds struct {
	mu      sync.Mutex
	entries map[string]operationEnd
}

type operationEnd struct {
	finishedAt string
	// hash is the StatusHash of the first status that showed the end.
	hash string
	seen time.Time
	// compared is set once the comparison after the end is known to be in the status: until the cache shows
	// the status written then, it must not be taken for the first sight of the end.
	compared bool
}

// compared reports whether a status of the Application key that shows the end of an operation, finishedAt,
// holds the managed cluster's comparison after that end: the hub shows that already (hubCompared), the
// comparison found the Application in sync, the status differs from the first one that showed the end (a later
// comparison brought it), or operationSettle has passed since that first one. When it does not, wait is how
// long until it will be taken as compared.
func (o *operationEnds) compared(key, finishedAt, hash string, synced, hubCompared bool, now time.Time) (ok bool, wait time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	end, known := o.entries[key]
	known = known && end.finishedAt == finishedAt
	switch {
	case hubCompared, synced:
		delete(o.entries, key)
		return true, 0
	case known && (end.compared || end.hash != hash || now.Sub(end.seen) >= operationSettle):
		end.compared = true
		o.entries[key] = end
		return true, 0
	case known:
		return false, operationSettle - now.Sub(end.seen)
	}
	if o.entries == nil {
		o.entries = map[string]operationEnd{}
	}
	o.entries[key] = operationEnd{finishedAt: finishedAt, hash: hash, seen: now}
	return false, operationSettle
}

// forget drops what is remembered of the Application key (it was deleted).
func (o *operationEnds) forget(key string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.entries, key)
}
