package application

import (
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	workv1 "open-cluster-management.io/api/work/v1"

	"github.com/argocd-pull/argocd-pull/internal/appstatus"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

func hubApp(mutate ...func(*unstructured.Unstructured)) *unstructured.Unstructured {
	app := argocd.NewApplication()
	app.SetNamespace("argocd")
	app.SetName("guestbook-cluster1")
	app.SetLabels(map[string]string{argocd.LabelPull: "true", "team": "a"})
	app.SetAnnotations(map[string]string{
		argocd.AnnotationManagedCluster: "cluster1",
		argocd.AnnotationSkipReconcile:  "true",
	})
	app.SetFinalizers([]string{argocd.ResourcesFinalizer, Finalizer})
	app.Object["spec"] = map[string]any{
		"project": "default",
		"source":  map[string]any{"repoURL": "http://git/repo.git", "path": "guestbook", "targetRevision": "HEAD"},
		"destination": map[string]any{
			"name":      "cluster1",
			"namespace": "guestbook",
		},
	}
	app.Object["status"] = map[string]any{"sync": map[string]any{"status": "Synced"}}
	for _, m := range mutate {
		m(app)
	}
	return app
}

func payload(t *testing.T, work *workv1.ManifestWork, kind string) *unstructured.Unstructured {
	t.Helper()
	for _, u := range manifestObjects(t, work) {
		if u.GetKind() == kind {
			return u
		}
	}
	t.Fatalf("no %s in work", kind)
	return nil
}

func kinds(t *testing.T, work *workv1.ManifestWork) []string {
	t.Helper()
	var out []string
	for _, u := range manifestObjects(t, work) {
		out = append(out, u.GetKind())
	}
	return out
}

// manifestObjects decodes a work's manifests, which BuildWork encodes (Raw) and leaves no object of.
func manifestObjects(t *testing.T, work *workv1.ManifestWork) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for i, m := range work.Spec.Workload.Manifests {
		if m.Object != nil || m.Raw == nil {
			t.Fatalf("manifest %d: object %v, %d bytes encoded; want the encoding alone", i, m.Object, len(m.Raw))
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(m.Raw); err != nil {
			t.Fatalf("manifest %d: %v", i, err)
		}
		out = append(out, u)
	}
	return out
}

func TestBuildWork(t *testing.T) {
	project := argocd.NewAppProject()
	project.SetName("team-a")
	project.SetNamespace("argocd")
	project.Object["spec"] = map[string]any{"sourceRepos": []any{"*"}}
	project.Object["status"] = map[string]any{"x": "y"}

	tests := []struct {
		name  string
		app   *unstructured.Unstructured
		opts  BuildOptions
		check func(t *testing.T, w *workv1.ManifestWork)
	}{{
		name: "plain application goes to the in-cluster server in the same namespace",
		app:  hubApp(),
		opts: BuildOptions{Cluster: "cluster1", SpokeArgoCDNamespace: "argocd"},
		check: func(t *testing.T, w *workv1.ManifestWork) {
			if got := strings.Join(kinds(t, w), ","); got != "Application" {
				t.Errorf("manifests = %s, want Application only", got)
			}
			if w.Namespace != "cluster1" || w.Name != WorkName("argocd", "guestbook-cluster1") {
				t.Errorf("work is %s/%s", w.Namespace, w.Name)
			}
			if w.Labels[argocd.LabelPull] != "true" {
				t.Errorf("work labels = %v", w.Labels)
			}
			if w.Annotations[argocd.AnnotationHubAppNamespace] != "argocd" || w.Annotations[argocd.AnnotationHubAppName] != "guestbook-cluster1" {
				t.Errorf("work annotations = %v", w.Annotations)
			}
			app := payload(t, w, "Application")
			if app.GetNamespace() != "argocd" {
				t.Errorf("spoke namespace = %s", app.GetNamespace())
			}
			dest, _, _ := unstructured.NestedMap(app.Object, "spec", "destination")
			if dest["server"] != argocd.InClusterServer || dest["name"] != nil || dest["namespace"] != "guestbook" {
				t.Errorf("destination = %v", dest)
			}
			if _, ok := app.GetAnnotations()[argocd.AnnotationSkipReconcile]; ok {
				t.Error("skip-reconcile must not reach the managed cluster")
			}
			if _, ok := app.GetAnnotations()[argocd.AnnotationManagedCluster]; ok {
				t.Error("ocm-managed-cluster annotation must not reach the managed cluster")
			}
			if _, ok := app.GetLabels()[argocd.LabelPull]; ok {
				t.Error("pull label must not reach the managed cluster")
			}
			if app.GetLabels()["team"] != "a" {
				t.Errorf("labels = %v", app.GetLabels())
			}
			if f := app.GetFinalizers(); len(f) != 1 || f[0] != argocd.ResourcesFinalizer {
				t.Errorf("finalizers = %v", f)
			}
			if _, ok := app.Object["status"]; ok {
				t.Error("status must not be delivered")
			}
			cfg := w.Spec.ManifestConfigs[0]
			if cfg.UpdateStrategy.Type != workv1.UpdateStrategyTypeServerSideApply {
				t.Errorf("update strategy = %s", cfg.UpdateStrategy.Type)
			}
			ign := cfg.UpdateStrategy.ServerSideApply.IgnoreFields
			if len(ign) != 1 || ign[0].Condition != workv1.IgnoreFieldsConditionOnSpokeChange || ign[0].JSONPaths[0] != ".operation" {
				t.Errorf("ignore fields = %+v", ign)
			}
			if cfg.FeedbackScrapeType != workv1.FeedbackWatchType {
				t.Errorf("feedback scrape type = %s", cfg.FeedbackScrapeType)
			}
			if cfg.ResourceIdentifier.Namespace != "argocd" || cfg.ResourceIdentifier.Name != "guestbook-cluster1" {
				t.Errorf("manifest config targets %+v", cfg.ResourceIdentifier)
			}
			if w.Spec.DeleteOption.PropagationPolicy != workv1.DeletePropagationPolicyTypeSelectivelyOrphan {
				t.Errorf("delete option = %+v", w.Spec.DeleteOption)
			}
		},
	}, {
		name: "app namespace annotation and non-default project add a Namespace and the AppProject, both orphaned",
		app: hubApp(func(u *unstructured.Unstructured) {
			a := u.GetAnnotations()
			a[argocd.AnnotationAppNamespace] = "team-a-apps"
			u.SetAnnotations(a)
			_ = unstructured.SetNestedField(u.Object, "team-a", "spec", "project")
		}),
		opts: BuildOptions{Cluster: "cluster1", SpokeArgoCDNamespace: "argocd", AppProject: project},
		check: func(t *testing.T, w *workv1.ManifestWork) {
			if got := strings.Join(kinds(t, w), ","); got != "Namespace,AppProject,Application" {
				t.Errorf("manifests = %s", got)
			}
			if payload(t, w, "Namespace").GetName() != "team-a-apps" {
				t.Error("namespace manifest has the wrong name")
			}
			proj := payload(t, w, "AppProject")
			if proj.GetNamespace() != "argocd" || proj.Object["status"] != nil {
				t.Errorf("project = %v", proj.Object)
			}
			if payload(t, w, "Application").GetNamespace() != "team-a-apps" {
				t.Error("application not in the annotated namespace")
			}
			rules := w.Spec.DeleteOption.SelectivelyOrphan.OrphaningRules
			if len(rules) != 2 || rules[0].Resource != "namespaces" || rules[1].Resource != "appprojects" || rules[1].Name != "team-a" {
				t.Errorf("orphaning rules = %+v", rules)
			}
		},
	}, {
		name: "destination annotations win",
		app: hubApp(func(u *unstructured.Unstructured) {
			a := u.GetAnnotations()
			a[argocd.AnnotationDestinationServer] = "https://other:6443"
			u.SetAnnotations(a)
		}),
		opts: BuildOptions{Cluster: "cluster1", SpokeArgoCDNamespace: "argocd"},
		check: func(t *testing.T, w *workv1.ManifestWork) {
			dest, _, _ := unstructured.NestedMap(payload(t, w, "Application").Object, "spec", "destination")
			if dest["server"] != "https://other:6443" || dest["name"] != nil {
				t.Errorf("destination = %v", dest)
			}
		},
	}, {
		name: "destination name annotation",
		app: hubApp(func(u *unstructured.Unstructured) {
			a := u.GetAnnotations()
			a[argocd.AnnotationDestinationName] = "in-cluster"
			u.SetAnnotations(a)
		}),
		opts: BuildOptions{Cluster: "cluster1", SpokeArgoCDNamespace: "argocd"},
		check: func(t *testing.T, w *workv1.ManifestWork) {
			dest, _, _ := unstructured.NestedMap(payload(t, w, "Application").Object, "spec", "destination")
			if dest["name"] != "in-cluster" || dest["server"] != nil {
				t.Errorf("destination = %v", dest)
			}
		},
	}, {
		name: "operation is kept; ApplicationSet owner is recorded",
		app: hubApp(func(u *unstructured.Unstructured) {
			u.Object["operation"] = map[string]any{"sync": map[string]any{"revision": "HEAD"}}
			u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "argoproj.io/v1alpha1", Kind: "ApplicationSet", Name: "guestbook", UID: "u"}})
		}),
		opts: BuildOptions{Cluster: "cluster1", SpokeArgoCDNamespace: "argocd", OperationBaseline: "2026-01-01T00:00:00Z"},
		check: func(t *testing.T, w *workv1.ManifestWork) {
			app := payload(t, w, "Application")
			if rev, _, _ := unstructured.NestedString(app.Object, "operation", "sync", "revision"); rev != "HEAD" {
				t.Errorf("operation = %v", app.Object["operation"])
			}
			info, _, _ := unstructured.NestedSlice(app.Object, "operation", "info")
			want := OperationMarker(map[string]any{"sync": map[string]any{"revision": "HEAD"}}, "2026-01-01T00:00:00Z")
			if len(info) != 1 || info[0].(map[string]any)["value"] != want || info[0].(map[string]any)["name"] != appstatus.OperationMarkerInfo {
				t.Errorf("operation info = %v, want the marker %s", info, want)
			}
			if w.Labels[argocd.LabelAppSet] != "true" || w.Annotations[argocd.AnnotationHostingAppSet] != "argocd/guestbook" {
				t.Errorf("work metadata = %v %v", w.Labels, w.Annotations)
			}
			if app.GetAnnotations()[argocd.AnnotationHostingAppSet] != "argocd/guestbook" {
				t.Errorf("payload annotations = %v", app.GetAnnotations())
			}
			if w.Annotations[AnnotationOperationBaseline] != "2026-01-01T00:00:00Z" {
				t.Errorf("operation baseline not kept: %v", w.Annotations)
			}
		},
	}, {
		name: "refresh annotation reaches the spoke",
		app: hubApp(func(u *unstructured.Unstructured) {
			a := u.GetAnnotations()
			a[argocd.AnnotationRefresh] = "hard"
			u.SetAnnotations(a)
		}),
		opts: BuildOptions{Cluster: "cluster1", SpokeArgoCDNamespace: "argocd"},
		check: func(t *testing.T, w *workv1.ManifestWork) {
			if payload(t, w, "Application").GetAnnotations()[argocd.AnnotationRefresh] != "hard" {
				t.Error("refresh annotation not delivered")
			}
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.app.DeepCopy()
			w, err := BuildWork(tt.app, tt.opts)
			if err != nil {
				t.Fatalf("BuildWork: %v", err)
			}
			if w.Annotations[AnnotationSpecHash] == "" {
				t.Error("no spec hash")
			}
			tt.check(t, w)
			if !equalJSON(before.Object, tt.app.Object) {
				t.Error("BuildWork modified the hub Application")
			}
		})
	}
}

func TestBuildWorkIsDeterministic(t *testing.T) {
	a, err := BuildWork(hubApp(), BuildOptions{Cluster: "c", SpokeArgoCDNamespace: "argocd"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := BuildWork(hubApp(), BuildOptions{Cluster: "c", SpokeArgoCDNamespace: "argocd"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Annotations[AnnotationSpecHash] != b.Annotations[AnnotationSpecHash] {
		t.Error("same Application, different hashes")
	}
	c, err := BuildWork(hubApp(func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "v2", "spec", "source", "targetRevision")
	}), BuildOptions{Cluster: "c", SpokeArgoCDNamespace: "argocd"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Annotations[AnnotationSpecHash] == c.Annotations[AnnotationSpecHash] {
		t.Error("changed spec, same hash")
	}
	// A status change alone must not change the work, nor any argocd-pull.io/ annotation (they are stripped).
	d, err := BuildWork(hubApp(func(u *unstructured.Unstructured) {
		u.Object["status"] = map[string]any{"sync": map[string]any{"status": "OutOfSync"}}
		a := u.GetAnnotations()
		a["argocd-pull.io/cache-note"] = "0123"
		u.SetAnnotations(a)
	}), BuildOptions{Cluster: "c", SpokeArgoCDNamespace: "argocd"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Annotations[AnnotationSpecHash] != d.Annotations[AnnotationSpecHash] {
		t.Error("status change changed the work")
	}
}

func TestBuildWorkRejects(t *testing.T) {
	tests := []struct {
		name string
		app  *unstructured.Unstructured
		want string
	}{{
		name: "invalid app namespace annotation",
		app: hubApp(func(u *unstructured.Unstructured) {
			a := u.GetAnnotations()
			a[argocd.AnnotationAppNamespace] = "Not_A Namespace"
			u.SetAnnotations(a)
		}),
		want: "not a valid namespace name",
	}, {
		name: "no spec",
		app:  hubApp(func(u *unstructured.Unstructured) { delete(u.Object, "spec") }),
		want: "has no spec",
	}, {
		name: "too large",
		app: hubApp(func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, strings.Repeat("x", MaxWorkBytes), "spec", "source", "helm", "values")
		}),
		want: "too large",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := BuildWork(tt.app, BuildOptions{Cluster: "c", SpokeArgoCDNamespace: "argocd"})
			var invalid *InvalidApplicationError
			if !errors.As(err, &invalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want InvalidApplicationError with %q", err, tt.want)
			}
		})
	}
}

func TestWorkName(t *testing.T) {
	long := strings.Repeat("a", 250)
	tests := []struct{ ns, name string }{
		{"argocd", "guestbook"},
		{"argocd", long},
		{long[:63], "x.y.z"},
		{"argocd", "UPPER.dots"},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		n := WorkName(tt.ns, tt.name)
		if len(n) > 63 || len(validation.IsDNS1123Label(n)) != 0 {
			t.Errorf("WorkName(%q, %q) = %q is not a DNS label", tt.ns, tt.name, n)
		}
		if seen[n] {
			t.Errorf("WorkName(%q, %q) = %q collides", tt.ns, tt.name, n)
		}
		seen[n] = true
		if WorkName(tt.ns, tt.name) != n {
			t.Error("not deterministic")
		}
	}
	// Names that only differ beyond the truncation point still differ.
	if WorkName("argocd", long+"1") == WorkName("argocd", long+"2") {
		t.Error("truncated names collide")
	}
}

func TestOperationMarker(t *testing.T) {
	op := map[string]any{"sync": map[string]any{"revision": "main"}}
	a, b := OperationMarker(op, "t0"), OperationMarker(op, "t1")
	if a == b {
		t.Error("the same operation against another baseline must get another marker")
	}
	if a != OperationMarker(map[string]any{"sync": map[string]any{"revision": "main"}}, "t0") {
		t.Error("not deterministic")
	}
	// A marker already in the hub operation's info (copied back from a cluster) is replaced, not repeated.
	marked := markedOperation(markedOperation(op, "t0"), "t0")
	if info := marked["info"].([]any); len(info) != 1 {
		t.Errorf("info = %v", info)
	}
}

// TestBuildWorkHydrateAnnotation: the hydrate annotation argocd-server sets with every refresh reaches the
// managed cluster only for an Application with a source hydrator.
func TestBuildWorkHydrateAnnotation(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hydrator bool
	}{{"plain source", false}, {"source hydrator", true}} {
		t.Run(tc.name, func(t *testing.T) {
			app := hubApp(func(a *unstructured.Unstructured) {
				ann := a.GetAnnotations()
				ann[argocd.AnnotationRefresh] = "normal"
				ann[argocd.AnnotationHydrate] = "normal"
				a.SetAnnotations(ann)
				if tc.hydrator {
					a.Object["spec"].(map[string]any)["sourceHydrator"] = map[string]any{
						"drySource": map[string]any{"repoURL": "http://git/repo.git", "path": "dry", "targetRevision": "HEAD"},
					}
				}
			})
			work, err := BuildWork(app, BuildOptions{Cluster: "cluster1", SpokeArgoCDNamespace: "argocd"})
			if err != nil {
				t.Fatal(err)
			}
			got := payload(t, work, "Application").GetAnnotations()
			if _, ok := got[argocd.AnnotationHydrate]; ok != tc.hydrator {
				t.Fatalf("hydrate annotation delivered = %v, want %v", ok, tc.hydrator)
			}
			if got[argocd.AnnotationRefresh] != "normal" {
				t.Fatalf("refresh annotation = %q", got[argocd.AnnotationRefresh])
			}
		})
	}
}

// benchApp is an Application shaped as test/bench creates them: owned by an ApplicationSet, automated sync.
func benchApp() *unstructured.Unstructured {
	return hubApp(func(u *unstructured.Unstructured) {
		yes := true
		u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "argoproj.io/v1alpha1", Kind: "ApplicationSet",
			Name: "set-01", UID: "u1", Controller: &yes, BlockOwnerDeletion: &yes}})
		u.Object["spec"].(map[string]any)["syncPolicy"] = map[string]any{
			"automated": map[string]any{"prune": true}, "syncOptions": []any{"CreateNamespace=true"}}
		delete(u.Object, "status")
	})
}

// BenchmarkBuildWork builds the work of an Application shaped as test/bench creates them (owned by an
// ApplicationSet, automated sync): what one build costs the controller (docs/benchmarks.md counts builds by it).
func BenchmarkBuildWork(b *testing.B) {
	app := benchApp()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := BuildWork(app, BuildOptions{Cluster: "cluster1", WorkName: "w", SpokeArgoCDNamespace: "argocd"}); err != nil {
			b.Fatal(err)
		}
	}
}
