package application

import (
	"testing"
	"time"
)

func TestRefreshesCovered(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 5, 0, 0, 0, time.UTC)
	var r refreshes
	if r.covered("ns/a", false, t0) {
		t.Fatal("covered before any hand-off")
	}
	r.handedOff("ns/a", false, t0)
	for _, tc := range []struct {
		name string
		key  string
		hard bool
		at   time.Duration
		want bool
	}{
		{"normal within the window", "ns/a", false, time.Second, true},
		{"hard after a normal one", "ns/a", true, time.Second, false},
		{"another application", "ns/b", false, time.Second, false},
		{"after the window", "ns/a", false, refreshWindow + time.Millisecond, false},
	} {
		if got := r.covered(tc.key, tc.hard, t0.Add(tc.at)); got != tc.want {
			t.Errorf("%s: covered = %v, want %v", tc.name, got, tc.want)
		}
	}
	r.handedOff("ns/b", true, t0.Add(2*refreshWindow))
	if !r.covered("ns/b", true, t0.Add(2*refreshWindow+time.Second)) || !r.covered("ns/b", false, t0.Add(2*refreshWindow+time.Second)) {
		t.Error("a hard refresh does not cover later ones")
	}
	if _, ok := r.entries["ns/a"]; ok {
		t.Error("an expired entry was kept")
	}
}
