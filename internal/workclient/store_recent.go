package workclient

import (
	"time"

	kubetypes "k8s.io/apimachinery/pkg/types"
)

// recentByUID keeps a value per UID for ttl and forgets the values oldest first, without scanning the map: the
// store's memory of what the source client has not caught up with yet. Its caller holds the store's lock.
type recentByUID[V any] struct {
	ttl   time.Duration
	items map[kubetypes.UID]recentItem[V]
	order []recentEntry // oldest first; an entry whose UID was put again since no longer counts
}

type recentItem[V any] struct {
	value V
	at    time.Time
}

type recentEntry struct {
	uid kubetypes.UID
	at  time.Time
}

func newRecentByUID[V any](ttl time.Duration) recentByUID[V] {
	return recentByUID[V]{ttl: ttl, items: map[kubetypes.UID]recentItem[V]{}}
}

// put keeps a value for uid, in place of any earlier one, and forgets the values older than ttl.
func (r *recentByUID[V]) put(uid kubetypes.UID, v V, now time.Time) {
	r.expire(now)
	r.order = append(r.order, recentEntry{uid: uid, at: now})
	r.items[uid] = recentItem[V]{value: v, at: now}
}

// take returns and forgets the value kept for uid.
func (r *recentByUID[V]) take(uid kubetypes.UID) (V, bool) {
	item, ok := r.items[uid]
	delete(r.items, uid)
	return item.value, ok
}

// get returns the value kept for uid.
func (r *recentByUID[V]) get(uid kubetypes.UID) (V, bool) {
	item, ok := r.items[uid]
	return item.value, ok
}

func (r *recentByUID[V]) expire(now time.Time) {
	expired := 0
	for _, e := range r.order {
		if now.Sub(e.at) <= r.ttl {
			break
		}
		if item, ok := r.items[e.uid]; ok && item.at.Equal(e.at) {
			delete(r.items, e.uid)
		}
		expired++
	}
	r.order = r.order[expired:]
}
