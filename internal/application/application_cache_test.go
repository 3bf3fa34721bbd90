package application

import (
	"encoding/json"
	"testing"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// TestCompactApplication: the cache keeps the summary of the status, whose hash is the hash of the status as
// the controller computes it for the status it writes.
func TestCompactApplication(t *testing.T) {
	status := map[string]any{
		"sync":   map[string]any{"status": "Synced", "revision": "abc"},
		"health": map[string]any{"status": "Healthy"},
		"resources": []any{
			map[string]any{"version": "v1", "kind": "ConfigMap", "namespace": "ns", "name": "cm", "status": "Synced"},
		},
		"conditions": []any{map[string]any{"type": "SyncError", "message": "boom", "lastTransitionTime": "2026-01-01T00:00:00Z"}},
	}
	raw, err := json.Marshal(status)
	if err != nil {
		t.Fatal(err)
	}
	app := &argocd.Application{Status: raw}
	app.Name = "a"
	app.ManagedFields = nil
	obj, err := compactApplication(app)
	if err != nil {
		t.Fatal(err)
	}
	s := obj.(*argocd.Application).Summary
	want, _ := argocd.StatusHash(status)
	if app.Status != nil || s == nil || s.Hash != want || s.Sync != "Synced" || s.Revision != "abc" || s.Health != "Healthy" ||
		len(s.Conditions) != 1 || s.Conditions[0].LastTransitionTime != "2026-01-01T00:00:00Z" || s.ResourceCount != 1 {
		t.Fatalf("summary = %+v (status kept: %v)", s, app.Status != nil)
	}
	if refs := argocd.ParseResourceRefs(s.Resources); len(refs) != 1 || refs[0].Kind != "ConfigMap" || refs[0].Name != "cm" {
		t.Fatalf("resources = %v", refs)
	}

	// The status as the controller writes it, with reconciledAt, is the same status.
	written := map[string]any{argocd.StatusReconciledAt: "2026-11-25T05:00:00Z"}
	for k, v := range status {
		written[k] = v
	}
	if raw, err = json.Marshal(written); err != nil {
		t.Fatal(err)
	}
	app = &argocd.Application{Status: raw}
	if obj, err = compactApplication(app); err != nil {
		t.Fatal(err)
	}
	if got := obj.(*argocd.Application).Summary.Hash; got != want {
		t.Fatalf("hash with reconciledAt = %s, want %s", got, want)
	}

	// A status that awaits the comparison after its operation's end (reconciledAt before it) hashes as the
	// controller computes it, apart from the same status compared since.
	for _, at := range []string{"2026-11-25T04:59:59Z", "2026-11-25T05:00:01Z"} {
		ended := map[string]any{argocd.StatusReconciledAt: at,
			"operationState": map[string]any{"phase": "Succeeded", "finishedAt": "2026-11-25T05:00:00Z"}}
		for k, v := range status {
			ended[k] = v
		}
		if raw, err = json.Marshal(ended); err != nil {
			t.Fatal(err)
		}
		if obj, err = compactApplication(&argocd.Application{Status: raw}); err != nil {
			t.Fatal(err)
		}
		summary := obj.(*argocd.Application).Summary
		want, _ := argocd.StatusHash(ended)
		if summary.Hash != want || summary.ReconciledAt != at {
			t.Fatalf("reconciledAt %s: summary hash %s reconciledAt %q, want %s", at, summary.Hash, summary.ReconciledAt, want)
		}
	}
	before, _ := argocd.StatusHash(map[string]any{argocd.StatusReconciledAt: "2026-11-25T04:59:59Z",
		"operationState": map[string]any{"finishedAt": "2026-11-25T05:00:00Z"}})
	after, _ := argocd.StatusHash(map[string]any{argocd.StatusReconciledAt: "2026-11-25T05:00:01Z",
		"operationState": map[string]any{"finishedAt": "2026-11-25T05:00:00Z"}})
	if before == after {
		t.Fatal("a comparison awaited and one done hash alike")
	}
}
