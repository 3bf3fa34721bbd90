package server

import (
	"reflect"
	"testing"

	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/payload"

	"github.com/argocd-pull/argocd-pull/internal/server/store"
)

// TestResyncAnswer: an agent's spec resync is answered with the resources newer than its copy, missing from it
// or being deleted, and a delete of each it holds that the server does not; the rest is not even loaded.
func TestResyncAnswer(t *testing.T) {
	held := []payload.ResourceVersion{{ResourceID: "a", ResourceVersion: 1}, {ResourceID: "b", ResourceVersion: 2},
		{ResourceID: "c", ResourceVersion: 1}, {ResourceID: "e", ResourceVersion: 1}, {ResourceID: "f", ResourceVersion: 3}}
	current := []store.SpecVersion{{ID: "a", Version: 2}, {ID: "b", Version: 2}, {ID: "d", Version: 1},
		{ID: "e", Version: 1, Deleting: true}, {ID: "f", Version: 2}}
	send, gone := resyncAnswer(held, current)
	if want := []string{"a", "d", "e"}; !reflect.DeepEqual(send, want) {
		t.Errorf("send %v, want %v", send, want)
	}
	if want := []payload.ResourceVersion{{ResourceID: "c", ResourceVersion: 1}}; !reflect.DeepEqual(gone, want) {
		t.Errorf("gone %v, want %v", gone, want)
	}
}

// TestRemovedMeanwhile: a resource to send that was removed before its spec was loaded is deleted on the agent
// that holds it; one the agent does not hold is not.
func TestRemovedMeanwhile(t *testing.T) {
	held := []payload.ResourceVersion{{ResourceID: "a", ResourceVersion: 1}, {ResourceID: "e", ResourceVersion: 1}}
	send := []string{"a", "d", "e"}
	if gone := removedMeanwhile(held, send, []store.SpecRow{{ID: "a"}, {ID: "d"}, {ID: "e"}}); gone != nil {
		t.Errorf("all loaded: gone %v", gone)
	}
	gone := removedMeanwhile(held, send, []store.SpecRow{{ID: "a"}})
	if want := []payload.ResourceVersion{{ResourceID: "e", ResourceVersion: 1}}; !reflect.DeepEqual(gone, want) {
		t.Errorf("d and e removed: gone %v, want %v", gone, want)
	}
}
