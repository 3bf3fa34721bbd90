package argocd_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"runtime"
	"testing"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

// hashBytes is the hash the controller gave a json.Marshal encoding before HashJSON, written out here rather
// than taken from the package: works carry it, and a change of its form must fail this test.
func hashBytes(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16])
}

// TestHashJSON: HashJSON and JSONSize give what hashing and measuring json.Marshal's encoding gives, for what
// the controller hashes (maps in key order, HTML escaped, nested raw JSON, nothing at all).
func TestHashJSON(t *testing.T) {
	for name, v := range map[string]any{
		"status": map[string]any{
			"sync":   map[string]any{"status": "Synced", "revision": "abc"},
			"health": map[string]any{"status": "Healthy", "message": "<ok> & fine"},
			"resources": []any{
				map[string]any{"kind": "Deployment", "name": "guestbook-ui"},
			},
		},
		"raw":    map[string]json.RawMessage{"b": json.RawMessage(`{"z":1,"a":[true,null]}`), "a": json.RawMessage(`"x"`)},
		"struct": struct{ Labels map[string]string }{map[string]string{"app": "guestbook", "tier": "web"}},
		"nil":    nil,
		"empty":  map[string]any{},
		"string": "line\nbreak",
	} {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		hash, size, err := argocd.HashJSON(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if want := hashBytes(data); hash != want || size != len(data) {
			t.Errorf("%s: HashJSON = %s, %d; want %s, %d (the hash of %s)", name, hash, size, want, len(data), data)
		}
		if got := argocd.JSONSize(v); got != len(data) {
			t.Errorf("%s: JSONSize = %d, want %d", name, got, len(data))
		}
	}
	if _, _, err := argocd.HashJSON(map[string]any{"f": func() {}}); err == nil {
		t.Error("HashJSON of a value JSON cannot encode: no error")
	}
	if got := argocd.JSONSize(make(chan int)); got != 0 {
		t.Errorf("JSONSize of a value JSON cannot encode = %d, want 0", got)
	}
}

// TestHashJSONAllocations: the encoding is not copied out: json.Marshal's copy alone is the size of the
// encoding (32 KiB here).
func TestHashJSONAllocations(t *testing.T) {
	if testutil.RaceEnabled {
		// A -race build's sync.Pool drops buffers at random; make test runs this test again without -race.
		t.Skip("allocation figures of a -race build mean nothing")
	}
	big := map[string]string{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		big[k] = string(make([]byte, 4096))
	}
	bytesPerOp := func(f func()) uint64 {
		f()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range 100 {
			f()
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / 100
	}
	marshal := bytesPerOp(func() { data, _ := json.Marshal(big); _ = hashBytes(data) })
	hashed := bytesPerOp(func() { _, _, _ = argocd.HashJSON(big) })
	if hashed > marshal/4 {
		t.Errorf("HashJSON allocated %d bytes, json.Marshal and hashing %d", hashed, marshal)
	}
}
