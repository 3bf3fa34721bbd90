package store

import (
	"testing"
	"time"
)

// TestDeleteAtAnOlderVersion: a source whose cache missed the answer to a change the server took (its
// connection was cut) deletes at the version before it; the delete is taken, as a new version, and a late
// change of the resource is refused after it.
func TestDeleteAtAnOlderVersion(t *testing.T) {
	st := &specState{exists: true, consumer: "c1", source: "src", version: 2, hash: "h2"}
	del := SpecWrite{Op: OpDelete, ID: "r1", Consumer: "c1", Source: "src", Name: "w", Version: 1}
	res := decideSpec(del, st, true, time.Now())
	if res.Err != nil || !res.Send || res.Row.Version != 3 || res.Row.DeletedAt == nil {
		t.Fatalf("delete at version 1 of a resource at version 2: %+v", res)
	}
	late := SpecWrite{Op: OpUpdate, ID: "r1", Consumer: "c1", Source: "src", Name: "w", Version: 4, Hash: "h4"}
	if res := decideSpec(late, st, true, time.Now()); res.Err == nil {
		t.Fatalf("a change after the delete was taken: %+v", res)
	}
}
