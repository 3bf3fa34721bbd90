package appsetreport

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestCoalescer(t *testing.T) {
	const interval = 10 * time.Second
	key := types.NamespacedName{Namespace: "apps", Name: "guestbook"}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	type step struct {
		op        string // "event" (schedule) or "eval" (begin)
		at        time.Duration
		wantDelay time.Duration
		wantQueue bool // for events: whether the report must be queued
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "the first change is evaluated at once", steps: []step{
			{op: "event", at: 0, wantDelay: 0, wantQueue: true},
			{op: "eval", at: 0, wantDelay: 0},
		}},
		{name: "changes within the interval wait for its end and are queued once", steps: []step{
			{op: "event", at: 0, wantQueue: true},
			{op: "eval", at: 0},
			{op: "event", at: 1 * time.Second, wantDelay: 9 * time.Second, wantQueue: true},
			{op: "event", at: 2 * time.Second, wantQueue: false},
			{op: "event", at: 9 * time.Second, wantQueue: false},
			{op: "eval", at: 10 * time.Second, wantDelay: 0},
		}},
		{name: "an early evaluation is put off to the end of the interval", steps: []step{
			{op: "eval", at: 0},
			{op: "eval", at: 3 * time.Second, wantDelay: 7 * time.Second},
			{op: "event", at: 4 * time.Second, wantQueue: false}, // already queued by the requeue
			{op: "eval", at: 10 * time.Second, wantDelay: 0},
		}},
		{name: "a change after a quiet interval is evaluated at once", steps: []step{
			{op: "eval", at: 0},
			{op: "event", at: 25 * time.Second, wantDelay: 0, wantQueue: true},
			{op: "eval", at: 25 * time.Second, wantDelay: 0},
		}},
		{name: "a change during an evaluation queues the next one", steps: []step{
			{op: "event", at: 0, wantQueue: true},
			{op: "eval", at: 0},
			{op: "event", at: 0, wantDelay: interval, wantQueue: true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCoalescer(interval)
			for i, s := range tt.steps {
				switch s.op {
				case "event":
					delay, queue := c.schedule(key, at(s.at))
					if queue != s.wantQueue || (queue && delay != s.wantDelay) {
						t.Fatalf("step %d: schedule() = %v, %v; want %v, %v", i, delay, queue, s.wantDelay, s.wantQueue)
					}
				case "eval":
					if wait := c.begin(key, at(s.at)); wait != s.wantDelay {
						t.Fatalf("step %d: begin() = %v, want %v", i, wait, s.wantDelay)
					}
				}
			}
		})
	}
}

// TestCoalescerUnderChurn replays a change every 10 ms for a minute and counts the evaluations.
func TestCoalescerUnderChurn(t *testing.T) {
	const interval = time.Second
	key := types.NamespacedName{Namespace: "apps", Name: "guestbook"}
	c := newCoalescer(interval)
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var queuedFor *time.Time
	evaluations, changes := 0, 0
	for step := 0; step < 6000; step++ {
		now = now.Add(10 * time.Millisecond)
		if queuedFor != nil && !now.Before(*queuedFor) {
			queuedFor = nil
			if wait := c.begin(key, now); wait == 0 {
				evaluations++
			} else {
				next := now.Add(wait)
				queuedFor = &next
			}
		}
		changes++
		if delay, ok := c.schedule(key, now); ok {
			next := now.Add(delay)
			if queuedFor == nil || next.Before(*queuedFor) {
				queuedFor = &next
			}
		}
	}
	if evaluations > 61 {
		t.Errorf("%d changes in 60s caused %d evaluations; want at most one per second", changes, evaluations)
	}
	if evaluations < 59 {
		t.Errorf("%d changes in 60s caused only %d evaluations; changes must not wait more than an interval", changes, evaluations)
	}
}

func TestCoalescerForgetsIdleReports(t *testing.T) {
	c := newCoalescer(time.Second)
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 5000 {
		c.begin(types.NamespacedName{Namespace: "apps", Name: fmt.Sprintf("appset-%d", i)}, now)
		now = now.Add(10 * time.Millisecond)
	}
	// Only the reports evaluated within the last second (100) and those since the last sweep may remain.
	if n := c.len(); n > 2*minSweep {
		t.Errorf("coalescer holds %d reports after 5000 idle ones; want it bounded", n)
	}
}
