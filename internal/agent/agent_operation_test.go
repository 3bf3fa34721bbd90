package agent

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/argocd-pull/argocd-pull/internal/appstatus"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

var env *loopback.Env

func TestMain(m *testing.M) { os.Exit(testutil.Main(m, loopback.Options{}, &env)) }

// TestOperationReset: a hub operation delivered by server-side apply, through the agent's client, to an
// Application whose last operation was an automated sync with prune: the old state is reset first, so the
// state Argo CD's controller then writes (a JSON merge patch, as Argo CD does) holds the hub's operation alone.
// A state of the delivered operation itself, or of an operation in progress, is kept.
func TestOperationReset(t *testing.T) {
	ctx := context.Background()
	gvr := argocd.ApplicationGVK.GroupVersion().WithResource("applications")
	plain := dynamic.NewForConfigOrDie(env.Hub.Config()).Resource(gvr).Namespace("default")
	cfg, err := withOperationReset(env.Hub.Config())
	if err != nil {
		t.Fatal(err)
	}
	agent := dynamic.NewForConfigOrDie(cfg).Resource(gvr).Namespace("default")

	app := func(name string, op map[string]any) *unstructured.Unstructured {
		u := argocd.NewApplication()
		u.SetNamespace("default")
		u.SetName(name)
		u.Object["spec"] = map[string]any{"project": "default",
			"destination": map[string]any{"server": argocd.InClusterServer},
			"source":      map[string]any{"repoURL": "http://git/repo.git", "path": "p"}}
		if op != nil {
			u.Object["operation"] = op
		}
		return u
	}
	hubOp := func(marker string) map[string]any {
		return map[string]any{"sync": map[string]any{"revision": "main"}, "initiatedBy": map[string]any{"username": "admin"},
			"info": []any{map[string]any{"name": appstatus.OperationMarkerInfo, "value": marker}}}
	}
	apply := func(c dynamic.ResourceInterface, u *unstructured.Unstructured) {
		t.Helper()
		if _, err := c.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "work-agent", Force: true}); err != nil {
			t.Fatal(err)
		}
	}
	controllerWrites := func(name, state string) {
		t.Helper()
		if _, err := plain.Patch(ctx, name, types.MergePatchType, []byte(`{"status":{"operationState":`+state+`}}`),
			metav1.PatchOptions{FieldManager: "argocd-application-controller"}); err != nil {
			t.Fatal(err)
		}
	}
	operationState := func(name string) map[string]any {
		t.Helper()
		u, err := plain.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s, _, _ := unstructured.NestedMap(u.Object, "status", "operationState")
		return s
	}
	const automated = `{"operation":{"sync":{"prune":true,"syncOptions":["Replace=true"]},"initiatedBy":{"automated":true}},` +
		`"phase":"Succeeded","startedAt":"2026-11-25T05:00:00Z","finishedAt":"2026-11-25T05:00:01Z","message":"done"}`

	// The old state is reset; Argo CD's new state is the hub's operation alone.
	apply(plain, app("a", nil))
	controllerWrites("a", automated)
	apply(agent, app("a", hubOp("m1")))
	if s := operationState("a"); s != nil {
		t.Fatalf("the old operation state is still there after the operation was delivered: %v", s)
	}
	controllerWrites("a", `{"operation":`+mustJSON(t, hubOp("m1"))+`,"phase":"Running","startedAt":"2026-11-25T05:01:00Z"}`)
	s := operationState("a")
	op, _ := s["operation"].(map[string]any)
	if by, _ := op["initiatedBy"].(map[string]any); by["automated"] != nil || by["username"] != "admin" {
		t.Fatalf("initiatedBy = %v, want the admin alone", by)
	}
	if sync, _ := op["sync"].(map[string]any); sync["prune"] != nil || sync["syncOptions"] != nil {
		t.Fatalf("sync = %v, want the hub operation's alone", sync)
	}
	if s["finishedAt"] != nil || s["message"] != nil {
		t.Fatalf("the old operation's end is still in the state: %v", s)
	}

	// Applied again (another change on the hub) while the operation runs: its state stays.
	a := app("a", hubOp("m1"))
	a.SetLabels(map[string]string{"changed": "true"})
	apply(agent, a)
	if s := operationState("a"); s["phase"] != "Running" {
		t.Fatalf("the running operation's state was reset: %v", s)
	}

	// An Application whose operation is waiting for a retry (phase Running) keeps its state.
	apply(plain, app("b", nil))
	controllerWrites("b", `{"operation":{"sync":{}},"phase":"Running","startedAt":"2026-11-25T05:00:00Z","finishedAt":"2026-11-25T05:00:01Z"}`)
	apply(agent, app("b", hubOp("m2")))
	if s := operationState("b"); s["phase"] != "Running" {
		t.Fatalf("an operation in progress lost its state: %v", s)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
