package application

import (
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// TestBuiltWorks: a work's hash is remembered for the Application's version and BuildWork's other inputs, and
// any of them changed is a new build.
func TestBuiltWorks(t *testing.T) {
	var b builtWorks
	base := []string{"cluster1", "work", "default", "", "", "false"}
	inputs := func(p []string) uint64 { return buildInputs(p[0], p[1], p[2], p[3], p[4], p[5] == "true") }
	b.record("ns/app", "7", inputs(base), "h1")
	if h, ok := b.hash("ns/app", "7", inputs(base)); !ok || h != "h1" {
		t.Fatalf("hash = %q, %v; want h1", h, ok)
	}
	if _, ok := b.hash("ns/app", "8", inputs(base)); ok {
		t.Error("a new version of the Application found the old build")
	}
	if _, ok := b.hash("ns/other", "7", inputs(base)); ok {
		t.Error("another Application found the build")
	}
	changes := [][]string{
		{"cluster2", "work", "default", "", "", "false"},
		{"cluster1", "work-2", "default", "", "", "false"},
		{"cluster1", "work", "team", "", "", "false"},
		{"cluster1", "work", "default", "12", "", "false"},
		{"cluster1", "work", "default", "", "2026-11-30T01:00:00Z", "false"},
		{"cluster1", "work", "default", "", "", "true"},
		// The fields are delimited: moving a character from one to the next is a change.
		{"cluster", "1work", "default", "", "", "false"},
	}
	for _, c := range changes {
		if _, ok := b.hash("ns/app", "7", inputs(c)); ok {
			t.Errorf("inputs %q found the build of %q", c, base)
		}
	}
	b.forget("ns/app")
	if _, ok := b.hash("ns/app", "7", inputs(base)); ok {
		t.Error("a forgotten build was found")
	}
}

// TestBuiltWorksAdvance: an update that changes nothing BuildWork reads carries the build to the new version; any
// other update, or an update from a version the build was not made from, does not.
func TestBuiltWorksAdvance(t *testing.T) {
	r := &Reconciler{}
	inputs := buildInputs("cluster1", "work", "", "", "", false)
	app := func(rv string, edit func(*argocd.Application)) *argocd.Application {
		a := &argocd.Application{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: "ns", Name: "app", ResourceVersion: rv,
				Labels:      map[string]string{"team": "a"},
				Annotations: map[string]string{argocd.AnnotationManagedCluster: "cluster1"},
				Finalizers:  []string{Finalizer},
			},
			Spec:   json.RawMessage(`{"project":"default"}`),
			Status: json.RawMessage(`{"sync":{"status":"OutOfSync"}}`),
		}
		if edit != nil {
			edit(a)
		}
		return a
	}
	update := func(o, n *argocd.Application) {
		r.applicationChanged().Update(event.UpdateEvent{ObjectOld: o, ObjectNew: n})
	}
	found := func(rv string) bool {
		_, ok := r.built.hash("ns/app", rv, inputs)
		return ok
	}

	r.built.record("ns/app", "7", inputs, "h1")
	update(app("7", nil), app("8", func(a *argocd.Application) { a.Status = json.RawMessage(`{"sync":{"status":"Synced"}}`) }))
	if !found("8") {
		t.Fatal("a status-only update did not carry the build to the new version")
	}
	if found("7") {
		t.Error("the old version still finds the build after it was carried")
	}
	// An update from a version the build was not made from (a reconcile recorded a later one) carries nothing.
	update(app("7", nil), app("9", nil))
	if found("9") {
		t.Error("an update from another version than the build's carried it")
	}

	edits := map[string]func(*argocd.Application){
		"spec":       func(a *argocd.Application) { a.Spec = json.RawMessage(`{"project":"team"}`) },
		"operation":  func(a *argocd.Application) { a.Operation = json.RawMessage(`{"sync":{}}`) },
		"label":      func(a *argocd.Application) { a.Labels["team"] = "b" },
		"annotation": func(a *argocd.Application) { a.Annotations[argocd.AnnotationRefresh] = "normal" },
		"finalizer":  func(a *argocd.Application) { a.Finalizers = nil },
		"owner": func(a *argocd.Application) {
			a.OwnerReferences = []metav1.OwnerReference{{Kind: "ApplicationSet", Name: "set"}}
		},
		"deletion": func(a *argocd.Application) { now := metav1.Now(); a.DeletionTimestamp = &now },
	}
	for name, edit := range edits {
		r.built.record("ns/app", "20", inputs, "h1")
		update(app("20", nil), app("21", edit))
		if found("21") {
			t.Errorf("a change of the %s carried the build to the new version", name)
		}
	}
}
