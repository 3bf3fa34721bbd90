package application

import (
	"testing"
	"time"

	"github.com/argocd-pull/argocd-pull/internal/appstatus"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// TestOperationEnds: the hub takes the cluster's comparison after an operation's end as done when it shows it
// already, when the status is Synced, when a later status differs from the first that showed the end, or once
// operationSettle has passed; a new operation's end starts over.
func TestOperationEnds(t *testing.T) {
	t0 := time.Date(2026, 11, 25, 5, 0, 0, 0, time.UTC)
	type call struct {
		finishedAt, hash    string
		synced, hubCompared bool
		at                  time.Duration
		want                bool
		wait                time.Duration
	}
	for _, tc := range []struct {
		name  string
		calls []call
	}{
		{"synced at once", []call{{finishedAt: "F", hash: "a", synced: true, want: true}}},
		{"the hub shows it", []call{{finishedAt: "F", hash: "a", hubCompared: true, want: true}}},
		{"a later comparison", []call{
			{finishedAt: "F", hash: "a", wait: operationSettle},
			{finishedAt: "F", hash: "a", at: time.Second, wait: operationSettle - time.Second},
			{finishedAt: "F", hash: "b", at: 2 * time.Second, want: true},
		}},
		{"nothing new after the settle time", []call{
			{finishedAt: "F", hash: "a", wait: operationSettle},
			{finishedAt: "F", hash: "a", at: operationSettle, want: true},
		}},
		{"another operation starts over", []call{
			{finishedAt: "F", hash: "a", wait: operationSettle},
			{finishedAt: "G", hash: "b", at: 2 * time.Second, wait: operationSettle},
			{finishedAt: "G", hash: "b", at: 3 * time.Second, wait: operationSettle - time.Second},
		}},
		{"compared until the hub shows it", []call{
			{finishedAt: "F", hash: "a", wait: operationSettle},
			{finishedAt: "F", hash: "b", at: time.Second, want: true},
			// The cache still shows the status before: the end is not seen for the first time again.
			{finishedAt: "F", hash: "b", at: 2 * time.Second, want: true},
			{finishedAt: "F", hash: "b", at: 3 * time.Second, hubCompared: true, want: true},
			// Forgotten once the hub showed it: a status that shows the end anew starts over.
			{finishedAt: "F", hash: "b", at: 4 * time.Second, wait: operationSettle},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o operationEnds
			for i, c := range tc.calls {
				got, wait := o.compared("ns/app", c.finishedAt, c.hash, c.synced, c.hubCompared, t0.Add(c.at))
				if got != c.want || wait != c.wait {
					t.Fatalf("call %d: compared = %v, wait %s; want %v, %s", i, got, wait, c.want, c.wait)
				}
			}
			if o.forget("ns/app"); len(o.entries) != 0 {
				t.Fatalf("entries after forget: %v", o.entries)
			}
		})
	}
}

// TestWithReconciledAtHash: the hash withReconciledAt returns is argocd.StatusHash of the status it returns,
// whether it was taken over from the status without reconciledAt (the comparison after the operation's end is
// in it) or taken again (before that comparison, without an operation's end, with the cluster's own
// reconciledAt).
func TestWithReconciledAtHash(t *testing.T) {
	now := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	ended := func(sync string, extra map[string]any) map[string]any {
		s := map[string]any{
			"sync":           map[string]any{"status": sync},
			"health":         map[string]any{"status": "Healthy"},
			"operationState": map[string]any{"phase": "Succeeded", "finishedAt": now.Add(-time.Minute).Format(time.RFC3339)},
		}
		for k, v := range extra {
			s[k] = v
		}
		return s
	}
	for _, tc := range []struct {
		name    string
		desired map[string]any
		// beforeEnd: the reconciledAt returned is before the operation's end.
		beforeEnd bool
	}{
		{"no operation", map[string]any{"sync": map[string]any{"status": "Synced"}}, false},
		{"ended, synced", ended("Synced", nil), false},
		{"ended, comparison awaited", ended("OutOfSync", nil), true},
		{"ended, the cluster's reconciledAt", ended("Synced", map[string]any{argocd.StatusReconciledAt: now.Add(-2 * time.Minute).Format(time.RFC3339)}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{}
			out, hash, _, err := r.withReconciledAt("ns/app", tc.desired, &argocd.StatusSummary{}, now)
			if err != nil {
				t.Fatal(err)
			}
			want, err := argocd.StatusHash(out)
			if err != nil {
				t.Fatal(err)
			}
			if hash != want {
				t.Errorf("hash = %s, StatusHash of the status returned = %s", hash, want)
			}
			at, _ := out[argocd.StatusReconciledAt].(string)
			end, _ := appstatus.OperationEnd(out)
			if got := argocd.ReconciledBeforeEnd(at, end.Format(time.RFC3339)); got != tc.beforeEnd {
				t.Errorf("reconciledAt %s before the end %s: %v, want %v", at, end, got, tc.beforeEnd)
			}
		})
	}
}
