package application

import (
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

// TestBuiltWorks: a work's hash is remembered for the Application's version and BuildWork's other inputs, and
// any of them changed is a new build.
func TestBuiltWorks(t *testing.T) {
	var b builtWorks
	base := []string{"cluster1", "work", "default", "", "", "false"}
	inputs := func(p []string) uint64 {
		return buildInputs(buildInput{cluster: p[0], workName: p[1], project: p[2], projectVersion: p[3], baseline: p[4],
			refreshCovered: p[5] == "true"})
	}
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

// TestBuiltFrom: the digest of what a work is built from changes with every input of BuildWork and with
// workFormat, and not with what BuildWork does not read: the Application's status, resourceVersion, managed
// fields, argocd-pull's own annotations.
func TestBuiltFrom(t *testing.T) {
	app := func(mutate ...func(*argocd.Application)) *argocd.Application {
		a := &argocd.Application{ObjectMeta: metav1.ObjectMeta{
			Namespace: "argocd", Name: "guestbook", ResourceVersion: "7",
			Labels:      map[string]string{argocd.LabelPull: "true", "team": "a"},
			Annotations: map[string]string{argocd.AnnotationManagedCluster: "cluster1"},
			Finalizers:  []string{argocd.ResourcesFinalizer},
		},
			Spec:   json.RawMessage(`{"project":"default","source":{"repoURL":"http://git/repo.git","targetRevision":"HEAD"}}`),
			Status: json.RawMessage(`{"sync":{"status":"Synced"}}`),
		}
		for _, m := range mutate {
			m(a)
		}
		return a
	}
	in := buildInput{cluster: "cluster1", workName: "w", project: "default"}
	base := builtFrom(app(), "argocd", in)
	if again := builtFrom(app(), "argocd", in); again != base {
		t.Fatalf("the same inputs gave %s and %s", base, again)
	}
	same := map[string]func(*argocd.Application){
		"status":            func(a *argocd.Application) { a.Status = json.RawMessage(`{"sync":{"status":"OutOfSync"}}`) },
		"resourceVersion":   func(a *argocd.Application) { a.ResourceVersion = "8" },
		"managedFields":     func(a *argocd.Application) { a.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}} },
		"own annotation":    func(a *argocd.Application) { a.Annotations[annotationPrefix+"note"] = "x" },
		"label order (map)": func(a *argocd.Application) { a.Labels = map[string]string{"team": "a", argocd.LabelPull: "true"} },
	}
	for name, m := range same {
		if got := builtFrom(app(m), "argocd", in); got != base {
			t.Errorf("%s changed the digest", name)
		}
	}
	changed := map[string]func(*argocd.Application){
		"spec":       func(a *argocd.Application) { a.Spec = json.RawMessage(`{"project":"default"}`) },
		"operation":  func(a *argocd.Application) { a.Operation = json.RawMessage(`{"sync":{}}`) },
		"label":      func(a *argocd.Application) { a.Labels["team"] = "b" },
		"annotation": func(a *argocd.Application) { a.Annotations[argocd.AnnotationRefresh] = "normal" },
		"finalizers": func(a *argocd.Application) { a.Finalizers = nil },
		"name":       func(a *argocd.Application) { a.Name = "guestbook2" },
		"namespace":  func(a *argocd.Application) { a.Namespace = "team-a" },
		"owner": func(a *argocd.Application) {
			a.OwnerReferences = []metav1.OwnerReference{{APIVersion: argocd.Group + "/v1alpha1", Kind: "ApplicationSet", Name: "set"}}
		},
		// The fields are delimited: moving a character from a key to its value is a change.
		"delimited": func(a *argocd.Application) { a.Labels = map[string]string{argocd.LabelPull: "true", "tea": "ma"} },
	}
	for name, m := range changed {
		if got := builtFrom(app(m), "argocd", in); got == base {
			t.Errorf("a changed %s left the digest", name)
		}
	}
	for _, other := range []buildInput{
		{cluster: "cluster2", workName: "w", project: "default"},
		{cluster: "cluster1", workName: "w2", project: "default"},
		{cluster: "cluster1", workName: "w", project: "default", projectVersion: "3"},
		{cluster: "cluster1", workName: "w", project: "default", baseline: "none"},
		{cluster: "cluster1", workName: "w", project: "default", refreshCovered: true},
	} {
		if got := builtFrom(app(), "argocd", other); got == base {
			t.Errorf("inputs %+v left the digest", other)
		}
	}
	if got := builtFrom(app(), "openshift-gitops", in); got == base {
		t.Error("another spoke Argo CD namespace left the digest")
	}
}

// TestWorkFormat pins the work BuildWork builds from a fixed Application for the current workFormat. When it
// fails, BuildWork builds another work from the same inputs: change workFormat (every work records the digest
// of what it was built from with it, and a restarted controller trusts a work whose digest is unchanged) and
// pin the new hash here.
func TestWorkFormat(t *testing.T) {
	pinned := map[int]string{1: "24eb54c5d247416069cd7f81f745b314"}
	w, err := BuildWork(hubApp(func(u *unstructured.Unstructured) {
		u.Object["operation"] = map[string]any{"sync": map[string]any{"revision": "HEAD"}}
		u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: argocd.Group + "/v1alpha1", Kind: "ApplicationSet", Name: "set"}})
	}), BuildOptions{Cluster: "cluster1", SpokeArgoCDNamespace: "argocd", OperationBaseline: "none"})
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Annotations[AnnotationSpecHash]; got != pinned[workFormat] {
		t.Fatalf("workFormat %d builds the fixed Application's work with spec hash %s, pinned %q: BuildWork "+
			"changed, so change workFormat and pin the new hash", workFormat, got, pinned[workFormat])
	}
}
