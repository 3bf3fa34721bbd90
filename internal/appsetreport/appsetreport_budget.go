package appsetreport

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
)

// writeBudget spreads the writes of large reports over time: the apiserver's cost of a write grows with the
// object, and during a rollout of thousands of Applications every report changes at every interval. The
// reports' writes together stay within a number of bytes per second; a write over budget is put off until
// the budget has room, and the report is evaluated again then, not before, so that the write shows the latest
// state and no evaluation is spent on a state that is not written.
// A report alone, or a small one, is still written at every interval.
type writeBudget struct {
	limiter *rate.Limiter

	mu sync.Mutex
	// reserved are the reports whose write was put off, with the time their reservation is due.
	reserved map[types.NamespacedName]time.Time
}

// newWriteBudget returns a budget of bytesPerSecond (none when 0) that lets an interval's worth go at once. A
// report larger than an interval's worth counts as an interval's worth.
func newWriteBudget(bytesPerSecond int, interval time.Duration) *writeBudget {
	b := &writeBudget{reserved: map[types.NamespacedName]time.Time{}}
	if bytesPerSecond > 0 {
		b.limiter = rate.NewLimiter(rate.Limit(bytesPerSecond), max(1, int(float64(bytesPerSecond)*interval.Seconds())))
	}
	return b
}

// take returns 0 when a write of size bytes of the report may go now, or how long to wait before the report is
// evaluated again and written. A report whose write was put off is written when it is evaluated again after
// that time, whatever its size then: its bytes were set aside.
func (b *writeBudget) take(key types.NamespacedName, size int, now time.Time) time.Duration {
	if b.limiter == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if due, ok := b.reserved[key]; ok {
		if wait := due.Sub(now); wait > 0 {
			return wait
		}
		delete(b.reserved, key)
		return 0
	}
	r := b.limiter.ReserveN(now, min(size, b.limiter.Burst()))
	wait := r.DelayFrom(now)
	if wait <= 0 {
		return 0
	}
	b.reserved[key] = now.Add(wait)
	return wait
}

// pending returns how long until the report's put-off write is due, 0 when it has none or it is due: an
// evaluation before then would find a state that is not written, so Reconcile waits for it instead.
func (b *writeBudget) pending(key types.NamespacedName, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if due, ok := b.reserved[key]; ok && due.After(now) {
		return due.Sub(now)
	}
	return 0
}

// forget drops a report's reservation: it needs no write (it is up to date, or it goes).
func (b *writeBudget) forget(key types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.reserved, key)
}
