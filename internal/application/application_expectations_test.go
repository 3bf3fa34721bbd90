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

func TestStatusExpectations(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	later := t0.Add(time.Second)
	// The cache shows version 10 with status A; the controller writes B (version 11), then the managed
	// cluster's status goes back to A before the cache has seen version 11.
	var e statusExpectations
	if got := e.known("app", "10", "A", t0); got != "A" {
		t.Fatalf("nothing written: known = %s, want the cached A", got)
	}
	e.writing("app", "B", t0)
	if own := e.observed("app", "11", "B", later); !own {
		t.Fatal("the event of the write, seen before the write returned, is the controller's own")
	}
	e.written("app", "11", later)
	if len(e.entries) != 0 {
		t.Fatal("a write whose event the cache has seen already is forgotten")
	}

	e.writing("app", "B", t0)
	e.written("app", "11", t0)
	if got := e.known("app", "10", "A", later); got != "B" {
		t.Fatalf("cache behind the write: known = %s, want the written B", got)
	}
	if own := e.observed("app", "10", "A", later); own {
		t.Fatal("an older version with another status is not the controller's own write")
	}
	if own := e.observed("app", "11", "B", later); !own || len(e.entries) != 0 {
		t.Fatalf("the write's own version: own = %v, entries = %v", own, e.entries)
	}
	if got := e.known("app", "11", "B", later); got != "B" {
		t.Fatalf("cache caught up: known = %s", got)
	}

	// A write overtaken by a later one: the earlier write's event is not the controller's last word.
	e.writing("app", "C", t0)
	e.written("app", "12", t0)
	e.writing("app", "A", t0)
	e.written("app", "13", t0)
	if own := e.observed("app", "12", "C", later); own {
		t.Fatal("an overtaken write is reconciled")
	}
	if got := e.known("app", "12", "C", later); got != "A" {
		t.Fatalf("known = %s, want the last write A", got)
	}
	if got := e.known("app", "14", "D", later); got != "D" || len(e.entries) != 0 {
		t.Fatalf("a newer cached version wins and forgets the write: known = %s", got)
	}

	// Resource versions that are not ordered integers: only the write's own version counts, or the TTL.
	e.writing("app", "B", t0)
	e.written("app", "x2", t0)
	if got := e.known("app", "x1", "A", later); got != "B" {
		t.Fatalf("opaque versions, cache behind: known = %s", got)
	}
	if got := e.known("app", "x1", "A", t0.Add(expectationTTL+time.Second)); got != "A" {
		t.Fatalf("opaque versions, write too old to trust: known = %s", got)
	}

	e.writing("app", "B", t0)
	e.forget("app")
	if len(e.entries) != 0 {
		t.Fatal("forget")
	}
}
