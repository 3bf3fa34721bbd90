package application

import (
	"testing"
	"time"
)

func TestExpectations(t *testing.T) {
	var e expectations
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if e.satisfied("w", "", "h1", t0) {
		t.Fatal("nothing written yet")
	}
	if !e.satisfied("w", "h1", "h1", t0) {
		t.Fatal("the cache shows the hash")
	}
	e.written("w", "h1", t0)
	if !e.satisfied("w", "", "h1", t0.Add(time.Second)) {
		t.Fatal("a recent write is trusted while the cache lags")
	}
	if e.satisfied("w", "", "h2", t0.Add(time.Second)) {
		t.Fatal("a different hash is not satisfied by the write")
	}
	if e.satisfied("w", "", "h1", t0.Add(expectationTTL+time.Second)) {
		t.Fatal("an old write is not trusted")
	}
	e.written("w", "h1", t0)
	if !e.satisfied("w", "h1", "h1", t0) || len(e.entries) != 0 {
		t.Fatal("an entry the cache caught up with is forgotten")
	}
}
