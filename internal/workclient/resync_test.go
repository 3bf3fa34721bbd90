package workclient

import (
	"slices"
	"testing"

	workv1 "open-cluster-management.io/api/work/v1"
)

// TestResyncCoversWorksBeingCreated: a new subscription resyncs the clusters with works, and the cluster of a
// work being created: published before the subscription, its status may have reached the server before it
// and the work may be stored only after the resync began.
func TestResyncCoversWorksBeingCreated(t *testing.T) {
	g := &GRPC{store: newWorkStore(), creating: map[string]int{}}
	if err := g.store.replace([]*workv1.ManifestWork{storedWork(1, "", 0)}); err != nil {
		t.Fatal(err)
	}
	sorted := func() []string {
		ns := g.resyncNamespaces()
		slices.Sort(ns)
		return ns
	}
	first, second, other := g.created("c2"), g.created("c2"), g.created("c1")
	if got := sorted(); !slices.Equal(got, []string{"c1", "c2"}) {
		t.Fatalf("resynced %v while works of c2 are created, want c1 and c2", got)
	}
	first()
	other()
	if got := sorted(); !slices.Equal(got, []string{"c1", "c2"}) {
		t.Fatalf("resynced %v while a work of c2 is still created, want c1 and c2", got)
	}
	second()
	if got := sorted(); !slices.Equal(got, []string{"c1"}) || len(g.creating) != 0 {
		t.Fatalf("resynced %v once the creates ended (%v counted), want c1", got, g.creating)
	}
}
