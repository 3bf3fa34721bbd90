package appsetreport

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// coalescer spaces the evaluations of each report at least an interval apart, so a burst of Application
// changes costs at most one evaluation, and so at most one write, per report per interval. The first change
// after a quiet interval is evaluated at once; the changes during an interval are evaluated together when it
// ends. Event handlers ask schedule when to queue a report; Reconcile calls begin, which refuses to evaluate
// early whatever queued the report.
type coalescer struct {
	interval time.Duration

	mu      sync.Mutex
	slots   map[types.NamespacedName]*slot
	sweepAt int
}

type slot struct {
	// last is when the report was last evaluated.
	last time.Time
	// due is when the report is queued for, zero when it is not queued.
	due time.Time
}

func newCoalescer(interval time.Duration) *coalescer {
	return &coalescer{interval: interval, slots: map[types.NamespacedName]*slot{}, sweepAt: minSweep}
}

func (c *coalescer) slot(key types.NamespacedName) *slot {
	s, ok := c.slots[key]
	if !ok {
		s = &slot{}
		c.slots[key] = s
	}
	return s
}

// schedule returns after how long the report must be queued, and false when it is already queued for no later
// than that.
func (c *coalescer) schedule(key types.NamespacedName, now time.Time) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.slot(key)
	at := now
	if next := s.last.Add(c.interval); next.After(at) {
		at = next
	}
	if !s.due.IsZero() && !s.due.After(at) {
		return 0, false
	}
	s.due = at
	return at.Sub(now), true
}

// begin starts an evaluation of the report and returns 0, or returns how long to wait when the last one was
// less than an interval ago (the caller requeues the report for then).
func (c *coalescer) begin(key types.NamespacedName, now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.slot(key)
	if next := s.last.Add(c.interval); next.After(now) {
		s.due = next
		return next.Sub(now)
	}
	s.last, s.due = now, time.Time{}
	c.sweep(now)
	return 0
}

// sweep drops the slots of reports that are not queued and were last evaluated more than an interval ago: such
// a slot acts as no slot at all. It runs when the number of slots doubles, so its cost is amortized and the
// coalescer holds about as many slots as there are reports that changed within the last interval.
func (c *coalescer) sweep(now time.Time) {
	if len(c.slots) < c.sweepAt {
		return
	}
	for key, s := range c.slots {
		if s.due.IsZero() && !s.last.Add(c.interval).After(now) {
			delete(c.slots, key)
		}
	}
	c.sweepAt = max(minSweep, 2*len(c.slots))
}

const minSweep = 1024

// len is the number of reports the coalescer knows of.
func (c *coalescer) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.slots)
}
