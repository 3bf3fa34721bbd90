package appstatus

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/jsonpath"
	workv1 "open-cluster-management.io/api/work/v1"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

func str(name, v string) workv1.FeedbackValue {
	return workv1.FeedbackValue{Name: name, Value: workv1.FieldValue{Type: workv1.String, String: &v}}
}

func raw(name, v string) workv1.FeedbackValue {
	return workv1.FeedbackValue{Name: name, Value: workv1.FieldValue{Type: workv1.JsonRaw, JsonRaw: &v}}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestStatusFromFeedback(t *testing.T) {
	tests := []struct {
		name   string
		values []workv1.FeedbackValue
		want   string
		errs   int
	}{{
		name: "no feedback",
		want: `{}`,
	}, {
		name: "scalars only",
		values: []workv1.FeedbackValue{
			str(FeedbackSyncStatus, "Synced"), str(FeedbackHealthStatus, "Progressing"), str(FeedbackRevision, "abc"),
			str(FeedbackOperationPhase, "Succeeded"), str(FeedbackOperationStartedAt, "2026-01-01T00:00:00Z"),
			str(FeedbackOperationFinishedAt, "2026-01-01T00:00:05Z"), str(FeedbackOperationMessage, "done"),
		},
		want: `{"health":{"status":"Progressing"},"operationState":{"finishedAt":"2026-01-01T00:00:05Z","message":"done","operation":{},"phase":"Succeeded","startedAt":"2026-01-01T00:00:00Z"},"sync":{"revision":"abc","status":"Synced"}}`,
	}, {
		name: "raw sections win over scalars; missing sections fall back",
		values: []workv1.FeedbackValue{
			str(FeedbackSyncStatus, "Synced"), str(FeedbackHealthStatus, "Healthy"),
			raw("status.sync", `{"status":"Synced","revision":"abc","comparedTo":{"destination":{"server":"x"}}}`),
			raw("status.resources", `[{"kind":"ConfigMap","name":"cm","status":"Synced"}]`),
			str("status.sourceType", "Directory"),
		},
		want: `{"health":{"status":"Healthy"},"resources":[{"kind":"ConfigMap","name":"cm","status":"Synced"}],"sourceType":"Directory","sync":{"comparedTo":{"destination":{"server":"x"}},"revision":"abc","status":"Synced"}}`,
	}, {
		name:   "operation without startedAt is left out",
		values: []workv1.FeedbackValue{str(FeedbackOperationPhase, "Running")},
		want:   `{}`,
	}, {
		name:   "broken raw section is reported",
		values: []workv1.FeedbackValue{raw("status.health", `{"status":`), str(FeedbackHealthStatus, "Healthy")},
		want:   `{"health":{"status":"Healthy"}}`,
		errs:   1,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, errs := StatusFromFeedback(tt.values)
			if s := mustJSON(t, got); s != tt.want {
				t.Errorf("status = %s\nwant     %s", s, tt.want)
			}
			if len(errs) != tt.errs {
				t.Errorf("errors = %v, want %d", errs, tt.errs)
			}
		})
	}
}

func work(gen int64, conds []metav1.Condition, manifest *workv1.ManifestCondition) *workv1.ManifestWork {
	w := &workv1.ManifestWork{}
	w.Namespace = "cluster1"
	w.Generation = gen
	w.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	w.Status.Conditions = conds
	if manifest != nil {
		w.Status.ResourceStatus.Manifests = []workv1.ManifestCondition{*manifest}
	}
	return w
}

func appManifest(conds []metav1.Condition, values ...workv1.FeedbackValue) *workv1.ManifestCondition {
	return &workv1.ManifestCondition{
		ResourceMeta:    workv1.ManifestResourceMeta{Group: "argoproj.io", Kind: "Application", Resource: "applications", Name: "a", Namespace: "argocd"},
		StatusFeedbacks: workv1.StatusFeedbackResult{Values: values},
		Conditions:      conds,
	}
}

func cond(t string, s metav1.ConditionStatus, gen int64, msg string) metav1.Condition {
	return metav1.Condition{Type: t, Status: s, ObservedGeneration: gen, Message: msg}
}

func TestFromWork(t *testing.T) {
	opts := Options{Now: time.Date(2026, 1, 1, 0, 10, 0, 0, time.UTC), ApplyTimeout: 5 * time.Minute}
	tests := []struct {
		name        string
		work        *workv1.ManifestWork
		opts        Options
		applied     bool
		everApplied bool
		conditions  []string // "Type: message substring"
		status      string
	}{{
		name:       "never applied past the timeout",
		work:       work(1, nil, nil),
		opts:       opts,
		conditions: []string{"DeliveryError: not applied 5m0s after it was created"},
		status:     `{}`,
	}, {
		name:   "not applied yet within the timeout",
		work:   work(1, nil, nil),
		opts:   Options{Now: time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC), ApplyTimeout: 5 * time.Minute},
		status: `{}`,
	}, {
		name: "applied at the current generation with feedback",
		work: work(2, []metav1.Condition{cond("Applied", "True", 2, "")},
			appManifest([]metav1.Condition{cond("Applied", "True", 2, ""), cond("Available", "True", 2, ""), cond("StatusFeedbackSynced", "True", 0, "")},
				str(FeedbackSyncStatus, "Synced"), str(FeedbackHealthStatus, "Healthy"))),
		opts:        opts,
		applied:     true,
		everApplied: true,
		status:      `{"health":{"status":"Healthy"},"sync":{"status":"Synced"}}`,
	}, {
		name:        "applied at an older generation",
		work:        work(3, []metav1.Condition{cond("Applied", "True", 2, "")}, nil),
		opts:        opts,
		everApplied: true,
		status:      `{}`,
	}, {
		name: "apply failed on the spoke",
		work: work(1, []metav1.Condition{cond("Applied", "False", 1, "1 of 1 failed")},
			appManifest([]metav1.Condition{cond("Applied", "False", 1, "admission webhook denied")})),
		opts: opts,
		conditions: []string{
			"DeliveryError: could not apply the work: 1 of 1 failed",
			"DeliveryError: applying the Application on cluster cluster1 failed: admission webhook denied",
		},
		status: `{}`,
	}, {
		name: "feedback too large",
		work: work(1, []metav1.Condition{cond("Applied", "True", 1, "")},
			appManifest([]metav1.Condition{cond("StatusFeedbackSynced", "False", 0, "the length of returned json raw string for name status.resources is larger than the maximum length 1024")},
				str(FeedbackSyncStatus, "Synced"))),
		opts:        opts,
		applied:     true,
		everApplied: true,
		conditions:  []string{"DeliveryWarning: larger than the maximum length 1024"},
		status:      `{"sync":{"status":"Synced"}}`,
	}, {
		name: "application gone from the spoke",
		work: work(1, []metav1.Condition{cond("Applied", "True", 1, "")},
			appManifest([]metav1.Condition{cond("Available", "False", 1, "Resource is not found")})),
		opts:        opts,
		applied:     true,
		everApplied: true,
		conditions:  []string{"DeliveryError: not available on cluster cluster1: Resource is not found"},
		status:      `{}`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := FromWork(tt.work, tt.opts)
			if d.Applied != tt.applied || d.EverApplied != tt.everApplied {
				t.Errorf("applied = %v/%v, want %v/%v", d.Applied, d.EverApplied, tt.applied, tt.everApplied)
			}
			if len(d.Conditions) != len(tt.conditions) {
				t.Fatalf("conditions = %+v, want %v", d.Conditions, tt.conditions)
			}
			for i, want := range tt.conditions {
				typ, msg, _ := strings.Cut(want, ": ")
				if d.Conditions[i].Type != typ || !strings.Contains(d.Conditions[i].Message, msg) {
					t.Errorf("condition %d = %+v, want %s", i, d.Conditions[i], want)
				}
			}
			if s := mustJSON(t, d.Status); s != tt.status {
				t.Errorf("status = %s, want %s", s, tt.status)
			}
		})
	}
}

func TestCompose(t *testing.T) {
	now := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	spoke := map[string]any{
		"sync":       map[string]any{"status": "Unknown"},
		"conditions": []any{map[string]any{"type": "ComparisonError", "message": "repo not found"}},
	}
	previous := []argocd.Condition{{Type: argocd.ConditionDeliveryWarning, Message: "old", LastTransitionTime: "2026-01-01T00:00:00Z"}}
	got := Compose(spoke, []Condition{{Type: argocd.ConditionDeliveryWarning, Message: "old"}, {Type: argocd.ConditionDeliveryError, Message: "new"}}, previous, now)
	want := map[string]any{
		"sync": map[string]any{"status": "Unknown"},
		"conditions": []any{
			map[string]any{"type": "ComparisonError", "message": "repo not found"},
			map[string]any{"type": argocd.ConditionDeliveryWarning, "message": "old", "lastTransitionTime": "2026-01-01T00:00:00Z"},
			map[string]any{"type": argocd.ConditionDeliveryError, "message": "new", "lastTransitionTime": "2026-01-02T00:00:00Z"},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Compose = %s\nwant %s", mustJSON(t, got), mustJSON(t, want))
	}
	if _, ok := spoke["conditions"].([]any); !ok || len(spoke["conditions"].([]any)) != 1 {
		t.Error("Compose modified its input")
	}
	if got := Compose(map[string]any{}, nil, nil, now); len(got) != 0 {
		t.Errorf("empty Compose = %v", got)
	}
}

// TestOperationMarkerPath: the marker's feedback path works with the JSONPath library and the options the OCM
// work agent reads feedback with.
func TestOperationMarkerPath(t *testing.T) {
	var path string
	for _, p := range FeedbackRules()[0].JsonPaths {
		if p.Name == FeedbackOperationMarker {
			path = p.Path
		}
	}
	app := map[string]any{"status": map[string]any{"operationState": map[string]any{"operation": map[string]any{
		"info": []any{map[string]any{"name": "reason", "value": "x"}, map[string]any{"name": OperationMarkerInfo, "value": "abc123"}},
	}}}}
	j := jsonpath.New(FeedbackOperationMarker).AllowMissingKeys(true)
	if err := j.Parse("{" + path + "}"); err != nil {
		t.Fatal(err)
	}
	results, err := j.FindResults(app)
	if err != nil || len(results) != 1 || len(results[0]) != 1 || results[0][0].Interface() != "abc123" {
		t.Fatalf("results = %v, %v", results, err)
	}
	results, err = j.FindResults(map[string]any{"status": map[string]any{}})
	if err != nil || len(results) != 1 || len(results[0]) != 0 {
		t.Fatalf("no operation: results = %v, %v", results, err)
	}
}

// TestWithReconciledAt: reconciledAt is the hub's time of the write, never before the end of the operation once
// the cluster's comparison after that end is in the status (argocd app sync waits for reconciledAt >=
// operationState.finishedAt), and one second before that end until then; the input is not changed, and the
// time alone does not change the status hash, only whether it is before the operation's end.
func TestWithReconciledAt(t *testing.T) {
	now := time.Date(2026, 11, 25, 5, 0, 0, 700_000_000, time.UTC)
	ended := func(at string) map[string]any {
		return map[string]any{"operationState": map[string]any{"phase": "Succeeded", "finishedAt": at}}
	}
	for _, tc := range []struct {
		name     string
		status   map[string]any
		compared bool
		want     string
	}{
		{"no operation", map[string]any{"sync": map[string]any{"status": "Synced"}}, true, "2026-11-25T05:00:00Z"},
		{"no operation, not compared", map[string]any{"sync": map[string]any{"status": "Synced"}}, false, "2026-11-25T05:00:00Z"},
		{"operation ended before", ended("2026-11-25T04:59:58Z"), true, "2026-11-25T05:00:00Z"},
		{"cluster clock ahead", ended("2026-11-25T05:00:03Z"), true, "2026-11-25T05:00:03Z"},
		{"comparison after the end awaited", ended("2026-11-25T04:59:58Z"), false, "2026-11-25T04:59:57Z"},
		{"operation running", map[string]any{"operationState": map[string]any{"phase": "Running"}}, false, "2026-11-25T05:00:00Z"},
		{"bad finishedAt", ended("soon"), false, "2026-11-25T05:00:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := WithReconciledAt(tc.status, now, tc.compared)
			if got[argocd.StatusReconciledAt] != tc.want {
				t.Fatalf("reconciledAt = %v, want %s", got[argocd.StatusReconciledAt], tc.want)
			}
			if _, ok := tc.status[argocd.StatusReconciledAt]; ok {
				t.Fatal("the input status was changed")
			}
			later := WithReconciledAt(tc.status, now.Add(time.Hour), tc.compared)
			a, _ := argocd.StatusHash(got)
			b, _ := argocd.StatusHash(later)
			if a != b {
				t.Fatal("the time of reconciledAt alone changes the status hash")
			}
			if _, ok := OperationEnd(tc.status); ok {
				other, _ := argocd.StatusHash(WithReconciledAt(tc.status, now, !tc.compared))
				if other == a {
					t.Fatal("the hash does not tell a comparison awaited from one done")
				}
			}
		})
	}
}

func TestSynced(t *testing.T) {
	if !Synced(map[string]any{"sync": map[string]any{"status": "Synced"}}) {
		t.Fatal("Synced status not synced")
	}
	for _, s := range []map[string]any{nil, {"sync": map[string]any{"status": "OutOfSync"}}, {"sync": "Synced"}} {
		if Synced(s) {
			t.Fatalf("%v synced", s)
		}
	}
}

func TestWithoutOperationState(t *testing.T) {
	in := map[string]any{"sync": "x", "operationState": map[string]any{"phase": "Succeeded"}}
	got := WithoutOperationState(in)
	if _, ok := got["operationState"]; ok || got["sync"] != "x" {
		t.Fatalf("got %v", got)
	}
	if _, ok := in["operationState"]; !ok {
		t.Fatal("the input status was changed")
	}
}

func TestSpokeUID(t *testing.T) {
	uid := "6f1c2e9a-0000-4000-8000-000000000001"
	app := workv1.ManifestCondition{ResourceMeta: workv1.ManifestResourceMeta{Group: argocd.Group, Resource: "applications"},
		StatusFeedbacks: workv1.StatusFeedbackResult{Values: []workv1.FeedbackValue{
			{Name: FeedbackSyncStatus, Value: workv1.FieldValue{Type: workv1.String, String: ptrTo("Synced")}},
			{Name: FeedbackUID, Value: workv1.FieldValue{Type: workv1.String, String: &uid}},
		}}}
	namespace := workv1.ManifestCondition{ResourceMeta: workv1.ManifestResourceMeta{Resource: "namespaces"},
		StatusFeedbacks: workv1.StatusFeedbackResult{Values: []workv1.FeedbackValue{
			{Name: FeedbackUID, Value: workv1.FieldValue{Type: workv1.String, String: ptrTo("not-the-application")}},
		}}}
	for _, tc := range []struct {
		name      string
		manifests []workv1.ManifestCondition
		want      string
	}{
		{"the Application's uid", []workv1.ManifestCondition{namespace, app}, uid},
		{"no Application manifest", []workv1.ManifestCondition{namespace}, ""},
		{"no feedback yet", []workv1.ManifestCondition{{ResourceMeta: app.ResourceMeta}}, ""},
	} {
		w := &workv1.ManifestWork{}
		w.Status.ResourceStatus.Manifests = tc.manifests
		if got := SpokeUID(w); got != tc.want {
			t.Errorf("%s: SpokeUID = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func ptrTo(s string) *string { return &s }
