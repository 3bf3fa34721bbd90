package sim

import (
	"encoding/json"
	"fmt"
	"regexp"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// hubApplication returns a pull-model Application as a hub would hold it.
func hubApplication(name, repoURL string, operation map[string]any) *unstructured.Unstructured {
	app := argocd.NewApplication()
	app.SetNamespace("argocd")
	app.SetName(name)
	app.SetLabels(map[string]string{argocd.LabelPull: "true"})
	app.SetAnnotations(map[string]string{argocd.AnnotationManagedCluster: "cluster1"})
	app.Object["spec"] = map[string]any{
		"project": "default",
		"source": map[string]any{
			"repoURL": repoURL, "path": "guestbook", "targetRevision": "HEAD",
		},
		"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": "guestbook"},
		"syncPolicy":  map[string]any{"automated": map[string]any{"prune": true}},
	}
	if operation != nil {
		app.Object["operation"] = operation
	}
	return app
}

func manifestOf(t *testing.T, app *unstructured.Unstructured) *manifestApp {
	t.Helper()
	raw, err := json.Marshal(app.Object)
	if err != nil {
		t.Fatal(err)
	}
	m, err := parseApplication(raw)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

var manualSync = map[string]any{
	"initiatedBy": map[string]any{"username": "admin"},
	"sync":        map[string]any{"revision": "HEAD", "syncStrategy": map[string]any{"hook": map[string]any{}}},
}

// TestArgoStateMachine drives the simulated Argo CD through its transitions.
func TestArgoStateMachine(t *testing.T) {
	cfg := &ArgoConfig{SyncDelay: 10 * time.Second, InvalidRepo: regexp.MustCompile(`invalid`), ResourcesPerApp: 2}
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	good := "https://git.example.com/apps.git"

	type step struct {
		at       time.Duration
		apply    *unstructured.Unstructured // applied at this step (nil: just time passing)
		flip     string                     // "sync" or "health"
		sync     string
		health   string
		phase    string
		history  int
		user     string
		settled  bool
		hasError bool
	}
	tests := []struct {
		name  string
		steps []step
	}{{
		name: "a new application syncs after the delay",
		steps: []step{
			{at: 0, apply: hubApplication("a", good, nil), sync: SyncOutOfSync, health: HealthProgressing, phase: PhaseRunning},
			{at: 9 * time.Second, sync: SyncOutOfSync, health: HealthProgressing, phase: PhaseRunning},
			{at: 10 * time.Second, sync: SyncSynced, health: HealthHealthy, phase: PhaseSucceeded, history: 1, settled: true},
		},
	}, {
		name: "an unreadable repository gives Unknown and a comparison error, and fixing it syncs",
		steps: []step{
			{at: 0, apply: hubApplication("a", "https://invalid.example.com/x.git", nil), sync: SyncUnknown, health: HealthHealthy, hasError: true},
			{at: time.Minute, sync: SyncUnknown, health: HealthHealthy, hasError: true},
			{at: 2 * time.Minute, apply: hubApplication("a", good, nil), sync: SyncOutOfSync, health: HealthProgressing, phase: PhaseRunning},
			{at: 2*time.Minute + 10*time.Second, sync: SyncSynced, health: HealthHealthy, phase: PhaseSucceeded, history: 1, settled: true},
		},
	}, {
		name: "an operation from the hub runs with its initiator",
		steps: []step{
			{at: 0, apply: hubApplication("a", good, nil), sync: SyncOutOfSync, health: HealthProgressing, phase: PhaseRunning},
			{at: 10 * time.Second, sync: SyncSynced, health: HealthHealthy, phase: PhaseSucceeded, history: 1, settled: true},
			{at: 20 * time.Second, apply: hubApplication("a", good, manualSync), sync: SyncOutOfSync, health: HealthProgressing, phase: PhaseRunning, history: 1, user: "admin"},
			{at: 30 * time.Second, sync: SyncSynced, health: HealthHealthy, phase: PhaseSucceeded, history: 2, user: "admin", settled: true},
		},
	}, {
		name: "an operation on an unreadable repository fails",
		steps: []step{
			{at: 0, apply: hubApplication("a", "https://invalid.example.com/x.git", manualSync), sync: SyncUnknown, health: HealthHealthy, phase: PhaseError, user: "admin", hasError: true},
		},
	}, {
		name: "drift flips health and sync and back",
		steps: []step{
			{at: 0, apply: hubApplication("a", good, nil), sync: SyncOutOfSync, health: HealthProgressing, phase: PhaseRunning},
			{at: 10 * time.Second, sync: SyncSynced, health: HealthHealthy, phase: PhaseSucceeded, history: 1, settled: true},
			{at: 11 * time.Second, flip: "health", sync: SyncSynced, health: HealthDegraded, phase: PhaseSucceeded, history: 1, settled: true},
			{at: 12 * time.Second, flip: "sync", sync: SyncOutOfSync, health: HealthDegraded, phase: PhaseSucceeded, history: 1, settled: true},
			{at: 13 * time.Second, flip: "health", sync: SyncOutOfSync, health: HealthHealthy, phase: PhaseSucceeded, history: 1, settled: true},
			{at: 14 * time.Second, flip: "sync", sync: SyncSynced, health: HealthHealthy, phase: PhaseSucceeded, history: 1, settled: true},
		},
	}, {
		name: "a label change is applied without a new sync",
		steps: []step{
			{at: 0, apply: hubApplication("a", good, nil), sync: SyncOutOfSync, health: HealthProgressing, phase: PhaseRunning},
			{at: 10 * time.Second, sync: SyncSynced, health: HealthHealthy, phase: PhaseSucceeded, history: 1, settled: true},
			{at: 20 * time.Second, apply: func() *unstructured.Unstructured {
				a := hubApplication("a", good, nil)
				a.SetLabels(map[string]string{"team": "x"})
				return a
			}(), sync: SyncSynced, health: HealthHealthy, phase: PhaseSucceeded, history: 1, settled: true},
		},
	}, {
		name: "history keeps Argo CD's default ten entries",
		steps: func() []step {
			steps := []step{
				{at: 0, apply: hubApplication("a", good, nil), sync: SyncOutOfSync, health: HealthProgressing, phase: PhaseRunning},
				{at: 10 * time.Second, sync: SyncSynced, health: HealthHealthy, phase: PhaseSucceeded, history: 1, settled: true},
			}
			for i := 1; i <= 12; i++ {
				op := map[string]any{"initiatedBy": map[string]any{"username": fmt.Sprintf("user%d", i)}, "sync": map[string]any{}}
				steps = append(steps,
					step{at: time.Duration(i) * time.Minute, apply: hubApplication("a", good, op), sync: SyncOutOfSync,
						health: HealthProgressing, phase: PhaseRunning, history: min(i, 10), user: fmt.Sprintf("user%d", i)},
					step{at: time.Duration(i)*time.Minute + 10*time.Second, sync: SyncSynced, health: HealthHealthy,
						phase: PhaseSucceeded, history: min(i+1, 10), user: fmt.Sprintf("user%d", i), settled: true})
			}
			return steps
		}(),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := &app{}
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				switch {
				case s.apply != nil:
					cfg.apply(a, manifestOf(t, s.apply), now, cfg.SyncDelay)
				case s.flip != "":
					a.flip(s.flip == "sync", now)
				default:
					a.advance(now)
				}
				phase, user := "", ""
				if a.op != nil {
					phase, user = a.op.phase, a.op.user
				}
				st := cfg.status(a)
				_, hasError := st["conditions"]
				got := fmt.Sprintf("%s/%s phase=%q history=%d user=%q settled=%v error=%v",
					a.sync, a.health, phase, len(a.history), user, a.settled(), hasError)
				want := fmt.Sprintf("%s/%s phase=%q history=%d user=%q settled=%v error=%v",
					s.sync, s.health, s.phase, s.history, s.user, s.settled, s.hasError)
				if got != want {
					t.Fatalf("step %d (at %s): got %s, want %s", i, s.at, got, want)
				}
			}
		})
	}
}

// TestArgoStatus checks the shape of the status the simulated Argo CD writes.
func TestArgoStatus(t *testing.T) {
	cfg := &ArgoConfig{SyncDelay: time.Second, ResourcesPerApp: 2}
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	a := &app{}
	cfg.apply(a, manifestOf(t, hubApplication("guestbook", "https://git.example.com/apps.git", nil)), t0, time.Second)
	a.advance(t0.Add(time.Second))
	st := cfg.status(a)
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Sync struct {
			Status, Revision string
			ComparedTo       struct {
				Source      map[string]any
				Destination map[string]any
			}
		}
		Health               struct{ Status, LastTransitionTime string }
		Resources            []map[string]any
		OperationState       map[string]any
		History              []map[string]any
		ResourceHealthSource string
		SourceType           string
		ReconciledAt         string
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Sync.Status != SyncSynced || len(got.Sync.Revision) != 40 || got.Sync.ComparedTo.Source["repoURL"] != "https://git.example.com/apps.git" ||
		got.Sync.ComparedTo.Destination["namespace"] != "guestbook" {
		t.Errorf("sync = %+v", got.Sync)
	}
	if got.Health.Status != HealthHealthy || got.Health.LastTransitionTime != "2025-01-02T03:04:06Z" {
		t.Errorf("health = %+v", got.Health)
	}
	if len(got.Resources) != 2 || got.Resources[1]["kind"] != "Deployment" || got.Resources[1]["group"] != "apps" ||
		got.Resources[0]["namespace"] != "guestbook" || got.Resources[0]["status"] != SyncSynced {
		t.Errorf("resources = %v", got.Resources)
	}
	op := got.OperationState
	if op["phase"] != PhaseSucceeded || op["message"] != messageSucceeded || op["startedAt"] != "2025-01-02T03:04:05Z" ||
		op["finishedAt"] != "2025-01-02T03:04:06Z" {
		t.Errorf("operationState = %v", op)
	}
	if by := op["operation"].(map[string]any)["initiatedBy"]; fmt.Sprint(by) != "map[automated:true]" {
		t.Errorf("operation.initiatedBy = %v", by)
	}
	results := op["syncResult"].(map[string]any)["resources"].([]any)
	if msg := results[1].(map[string]any)["message"]; msg != "deployment.apps/guestbook created" {
		t.Errorf("sync result message = %v", msg)
	}
	if len(got.History) != 1 || got.History[0]["id"] != float64(0) || got.History[0]["revision"] != got.Sync.Revision {
		t.Errorf("history = %v", got.History)
	}
	if got.ResourceHealthSource != "appTree" || got.SourceType != "Directory" || got.ReconciledAt == "" {
		t.Errorf("resourceHealthSource=%q sourceType=%q reconciledAt=%q", got.ResourceHealthSource, got.SourceType, got.ReconciledAt)
	}
}

func TestRevision(t *testing.T) {
	sha := "0123456789abcdef0123456789abcdef01234567"
	for _, tt := range []struct {
		name   string
		source map[string]any
		want   string
	}{
		{"a commit is kept", map[string]any{"repoURL": "r", "targetRevision": sha}, sha},
		{"a chart version is kept", map[string]any{"repoURL": "r", "chart": "c", "targetRevision": "1.2.3"}, "1.2.3"},
		{"a branch resolves to a stable SHA", map[string]any{"repoURL": "r", "targetRevision": "main"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			app := hubApplication("a", "r", nil)
			app.Object["spec"].(map[string]any)["source"] = tt.source
			m := manifestOf(t, app)
			got := m.revision()
			if tt.want != "" && got != tt.want {
				t.Errorf("revision = %q, want %q", got, tt.want)
			}
			if tt.want == "" && (!commitSHA.MatchString(got) || got != manifestOf(t, app).revision()) {
				t.Errorf("revision = %q, want a stable SHA", got)
			}
		})
	}
}
