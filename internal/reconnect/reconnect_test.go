package reconnect

import (
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		calls    []time.Duration // offsets from t0 of earlier calls
		at       time.Duration
		min, max time.Duration
	}{
		{name: "first loss", at: 0, min: MinDelay / 2, max: MinDelay},
		{name: "many clients notice at once", calls: []time.Duration{0, 0, 0, 0, 0, 0, 0, 0}, at: 0, min: MinDelay / 2, max: MinDelay},
		{name: "four seconds into an outage", calls: []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second}, at: 4 * time.Second,
			min: time.Second, max: 2 * time.Second},
		{name: "a long outage", calls: []time.Duration{0, 3 * time.Second, 6 * time.Second, 9 * time.Second, 12 * time.Second}, at: 15 * time.Second,
			min: MaxDelay / 2, max: MaxDelay},
		{name: "a new outage after a quiet spell", calls: []time.Duration{0, 3 * time.Second, 6 * time.Second}, at: time.Minute,
			min: MinDelay / 2, max: MinDelay},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 20 {
				var b Backoff
				for _, c := range tc.calls {
					b.Delay(t0.Add(c))
				}
				if d := b.Delay(t0.Add(tc.at)); d < tc.min || d > tc.max {
					t.Fatalf("delay %s, want between %s and %s", d, tc.min, tc.max)
				}
			}
		})
	}
}
