package cmp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/yaml"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// env is an environment for a generate run; missing variables read as empty.
type env map[string]string

func (e env) get(k string) string { return e[k] }

func generate(t *testing.T, dir string, e env, mutate ...func(*GenerateOptions)) ([]*workv1.ManifestWork, error) {
	t.Helper()
	o := NewGenerateOptions()
	o.Path = dir
	o.ReadApplication = false
	for _, m := range mutate {
		m(o)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	return o.generate(context.Background(), e.get)
}

// manifests decodes a work's manifests, in order.
func manifests(t *testing.T, w *workv1.ManifestWork) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	for _, m := range w.Spec.Workload.Manifests {
		u := &unstructured.Unstructured{}
		if err := json.Unmarshal(m.Raw, &u.Object); err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
	}
	return out
}

func ids(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		id := o.GetKind() + " " + o.GetName()
		if o.GetNamespace() != "" {
			id = o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
		}
		out = append(out, id)
	}
	return out
}

func source(name string) string { return filepath.Join("testdata", "sources", name) }

func TestGenerateDirectory(t *testing.T) {
	works, err := generate(t, source("guestbook"), env{
		EnvAppName: "guestbook", EnvAppNamespace: "argocd",
		EnvTargetCluster: "cluster1, cluster2", EnvTargetNamespace: "guestbook", EnvCreateNamespace: "true",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(works) != 2 || works[0].Namespace != "cluster1" || works[1].Namespace != "cluster2" {
		t.Fatalf("works in %v, want one in cluster1 and one in cluster2", workNamespaces(works))
	}
	for _, w := range works {
		if w.Name != "guestbook" {
			t.Errorf("work name %q, want the Application's", w.Name)
		}
		if w.Annotations[argocd.AnnotationHubAppNamespace] != "argocd" || w.Annotations[argocd.AnnotationHubAppName] != "guestbook" {
			t.Errorf("annotations %v, want the hub Application's namespace and name", w.Annotations)
		}
		if _, ok := w.Labels[argocd.LabelPull]; ok {
			t.Errorf("the work carries %s: argocd-pull's controller would take it for one of its own", argocd.LabelPull)
		}
		got := strings.Join(ids(manifests(t, w)), ", ")
		// The created namespace first, then Argo CD's kind order; notes.yaml and .github are not manifests.
		want := "Namespace guestbook, ConfigMap guestbook-config/guestbook-settings, ClusterRole guestbook-reader, " +
			"Service guestbook/guestbook-ui, Deployment guestbook/guestbook-ui"
		if got != want {
			t.Errorf("manifests\n got %s\nwant %s", got, want)
		}
		rules := w.Spec.DeleteOption.SelectivelyOrphan.OrphaningRules
		if w.Spec.DeleteOption.PropagationPolicy != workv1.DeletePropagationPolicyTypeSelectivelyOrphan ||
			len(rules) != 1 || rules[0].Resource != "namespaces" || rules[0].Name != "guestbook" {
			t.Errorf("delete option %+v: want the created namespace orphaned, everything else deleted", w.Spec.DeleteOption)
		}
	}
	golden(t, "guestbook.yaml", works[:1])
}

func workNamespaces(works []*workv1.ManifestWork) []string {
	var out []string
	for _, w := range works {
		out = append(out, w.Namespace)
	}
	return out
}

// golden compares the printed works with testdata/golden/name (-update rewrites it).
func golden(t *testing.T, name string, works []*workv1.ManifestWork) {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteWorks(&buf, works); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to write it)", err, t.Name())
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("generate printed\n%s\nwant (%s)\n%s", buf.String(), path, want)
	}
}

func TestGenerateFeedbackAndApplyOptions(t *testing.T) {
	works, err := generate(t, source("guestbook"), env{EnvAppName: "guestbook", EnvTargetCluster: "cluster1", EnvTargetNamespace: "guestbook"})
	if err != nil {
		t.Fatal(err)
	}
	byResource := map[string]workv1.ManifestConfigOption{}
	for _, c := range works[0].Spec.ManifestConfigs {
		byResource[c.ResourceIdentifier.Group+"/"+c.ResourceIdentifier.Resource] = c
	}
	for _, r := range []string{"/services", "/configmaps", "apps/deployments", "rbac.authorization.k8s.io/clusterroles"} {
		c, ok := byResource[r]
		if !ok {
			t.Errorf("no manifest config for %s", r)
			continue
		}
		if c.ResourceIdentifier.Name != "*" || c.ResourceIdentifier.Namespace != "*" {
			t.Errorf("%s: identifier %+v, want every object of the type", r, c.ResourceIdentifier)
		}
		if s := c.UpdateStrategy; s == nil || s.Type != workv1.UpdateStrategyTypeServerSideApply || !s.ServerSideApply.Force {
			t.Errorf("%s: update strategy %+v, want forced server-side apply", r, s)
		}
	}
	d := byResource["apps/deployments"]
	if len(d.FeedbackRules) != 1 || d.FeedbackRules[0].Type != workv1.JSONPathsType || d.FeedbackScrapeType != workv1.FeedbackWatchType {
		t.Fatalf("deployment feedback %+v, want watched JSONPaths", d)
	}
	if len(byResource["/services"].FeedbackRules) != 0 {
		t.Errorf("services get feedback rules; Argo CD has no health for a ClusterIP Service")
	}
}

func TestGenerateKustomize(t *testing.T) {
	works, err := generate(t, source("kustomize/overlay"), env{EnvAppName: "podinfo", EnvTargetCluster: "cluster1"})
	if err != nil {
		t.Fatal(err)
	}
	objs := manifests(t, works[0])
	got := strings.Join(ids(objs), ", ")
	want := "Namespace podinfo, ConfigMap podinfo/prod-podinfo-settings-"
	if !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "Service podinfo/prod-podinfo, Deployment podinfo/prod-podinfo") {
		t.Fatalf("manifests %s, want the overlay's namespace, generated ConfigMap (with its hash), Service and Deployment", got)
	}
	dep := objs[len(objs)-1]
	if r, _, _ := unstructured.NestedFieldNoCopy(dep.Object, "spec", "replicas"); r != float64(2) {
		t.Errorf("replicas %v, want the overlay's 2", r)
	}
	sel, _, _ := unstructured.NestedStringMap(dep.Object, "spec", "selector", "matchLabels")
	if sel["app.kubernetes.io/name"] != "podinfo" {
		t.Errorf("selector %v, want the base's label", sel)
	}
	if works[0].Spec.DeleteOption.SelectivelyOrphan == nil || len(works[0].Spec.DeleteOption.SelectivelyOrphan.OrphaningRules) != 0 {
		t.Errorf("a Namespace of the source itself must be deleted with the work, as Argo CD prunes it: %+v", works[0].Spec.DeleteOption)
	}
}

func TestGenerateHelm(t *testing.T) {
	works, err := generate(t, source("helm"), env{
		EnvAppName: "hello", EnvTargetCluster: "cluster1", EnvTargetNamespace: "web",
		EnvHelmValues: "values-prod.yaml", EnvKubeVersion: "1.33.4", EnvAPIVersions: "v1,apps/v1,policy/v1,policy/v1/PodDisruptionBudget",
	})
	if err != nil {
		t.Fatal(err)
	}
	objs := manifests(t, works[0])
	got := strings.Join(ids(objs), ", ")
	want := "PodDisruptionBudget web/hello-hello, CustomResourceDefinition greetings.hello.example.com, Service web/hello-hello, " +
		"Deployment web/hello-hello, Greeting hello"
	if got != want {
		t.Fatalf("manifests\n got %s\nwant %s (the test hook and NOTES.txt left out, the CRD's cluster-scoped kind without namespace)", got, want)
	}
	dep := objs[3]
	if r, _, _ := unstructured.NestedFieldNoCopy(dep.Object, "spec", "replicas"); r != float64(3) {
		t.Errorf("replicas %v, want values-prod.yaml's 3", r)
	}
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	if img := containers[0].(map[string]any)["image"]; img != "nginx:1.27.1" {
		t.Errorf("image %v, want values.yaml's repository with values-prod.yaml's tag", img)
	}
	if v := objs[2].GetAnnotations()["kube-version"]; v != "v1.33.4" {
		t.Errorf("templates saw Kubernetes %q, want KUBE_VERSION's v1.33.4", v)
	}
	for _, c := range works[0].Spec.ManifestConfigs {
		if c.ResourceIdentifier.Group == "hello.example.com" && c.ResourceIdentifier.Resource != "greetings" {
			t.Errorf("Greeting's resource %q, want the CRD's plural", c.ResourceIdentifier.Resource)
		}
	}
}

func TestGenerateErrors(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		env   env
		opts  func(*GenerateOptions)
		want  string
	}{{
		name:  "manifest that cannot be parsed",
		files: map[string]string{"app.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: x\ndata: [unclosed\n"},
		want:  "app.yaml, document 1: cannot be parsed",
	}, {
		name:  "second document cannot be parsed",
		files: map[string]string{"app.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: x}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: : b}\n"},
		want:  "app.yaml, document 2: cannot be parsed",
	}, {
		name:  "object without kind",
		files: map[string]string{"app.yaml": "apiVersion: v1\nKind: ConfigMap\nmetadata:\n  name: a\n"},
		want:  "app.yaml: is not a Kubernetes object: apiVersion and kind are required",
	}, {
		name:  "namespaced object without namespace",
		files: map[string]string{"app.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n"},
		want:  "Deployment.apps web (app.yaml): has no namespace: set metadata.namespace, or TARGET_NAMESPACE in the Application's plugin env",
	}, {
		name:  "custom resource of an unknown cluster-scoped kind",
		files: map[string]string{"app.yaml": "apiVersion: example.com/v1\nkind: Tenant\nmetadata:\n  name: t\n"},
		want:  "if Tenant.example.com is cluster-scoped, name it in the plugin's --cluster-scoped-kinds",
	}, {
		name:  "object without name",
		files: map[string]string{"app.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  namespace: x\n"},
		want:  "app.yaml: ConfigMap has no metadata.name",
	}, {
		name:  "generateName",
		files: map[string]string{"app.yaml": "apiVersion: batch/v1\nkind: Job\nmetadata:\n  generateName: migrate-\n  namespace: x\n"},
		want:  "uses metadata.generateName, which a ManifestWork cannot apply",
	}, {
		name: "object rendered twice",
		files: map[string]string{
			"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: x}\n",
			"b.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: x}\n",
		},
		want: "ConfigMap x/c (b.yaml): is rendered twice (first in a.yaml)",
	}, {
		name:  "nothing rendered",
		files: map[string]string{"README.md": "# empty\n"},
		want:  "the source rendered no manifests",
	}, {
		name:  "work over the size limit",
		files: map[string]string{"big.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big, namespace: x}\ndata:\n  blob: " + strings.Repeat("x", 2000) + "\n"},
		opts:  func(o *GenerateOptions) { o.MaxManifestBytes = 1024 },
		want:  "a ManifestWork holds at most 1024 (OCM's limit): split the Application",
	}, {
		name:  "no target cluster",
		files: map[string]string{"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: x}\n"},
		env:   env{EnvAppName: "app"},
		want:  "no target cluster: set TARGET_CLUSTER in the Application's plugin env",
	}, {
		name:  "invalid target cluster",
		files: map[string]string{"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: x}\n"},
		env:   env{EnvAppName: "app", EnvTargetCluster: "Cluster_1"},
		want:  `TARGET_CLUSTER: cluster "Cluster_1" is not a valid cluster name`,
	}, {
		name:  "not run by Argo CD",
		files: map[string]string{"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: x}\n"},
		env:   env{},
		want:  "ARGOCD_APP_NAME is not set",
	}, {
		name:  "helm chart without namespace",
		files: map[string]string{"Chart.yaml": "apiVersion: v2\nname: c\nversion: 0.1.0\n"},
		want:  "a Helm chart needs a release namespace: set TARGET_NAMESPACE",
	}, {
		name: "helm dependency not vendored",
		files: map[string]string{
			"Chart.yaml": "apiVersion: v2\nname: c\nversion: 0.1.0\ndependencies:\n- name: redis\n  version: 1.0.0\n  repository: https://charts.example.com\n",
		},
		env:  env{EnvAppName: "app", EnvTargetCluster: "cluster1", EnvTargetNamespace: "web"},
		want: "dependencies redis are not in charts/",
	}, {
		name: "helm template that fails",
		files: map[string]string{
			"Chart.yaml":          "apiVersion: v2\nname: c\nversion: 0.1.0\n",
			"templates/cm.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ required \"name is required\" .Values.name }}\n",
			"templates/_help.tpl": "",
		},
		env:  env{EnvAppName: "app", EnvTargetCluster: "cluster1", EnvTargetNamespace: "web"},
		want: "name is required",
	}, {
		name: "kustomization that fails",
		files: map[string]string{
			"kustomization.yaml": "resources:\n- missing.yaml\n",
		},
		want: "render the Kustomize source: kustomize build: ",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range tt.files {
				path := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			e := tt.env
			if e == nil {
				e = env{EnvAppName: "app", EnvTargetCluster: "cluster1"}
			}
			var opts []func(*GenerateOptions)
			if tt.opts != nil {
				opts = append(opts, tt.opts)
			}
			works, err := generate(t, dir, e, opts...)
			if err == nil {
				t.Fatalf("generate succeeded with %d works, want an error containing %q", len(works), tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

func TestGenerateReadsTheClusterFromTheApplication(t *testing.T) {
	app := argocd.NewApplication()
	app.SetNamespace("argocd")
	app.SetName("guestbook-cluster2")
	app.SetAnnotations(map[string]string{argocd.AnnotationManagedCluster: "cluster2"})
	app.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "argoproj.io/v1alpha1", Kind: "ApplicationSet", Name: "guestbook", UID: "u"}})
	_ = unstructured.SetNestedField(app.Object, "guestbook", "spec", "destination", "namespace")
	var asked string
	read := func(_ context.Context, namespace, name string) (*unstructured.Unstructured, error) {
		asked = namespace + "/" + name
		if asked != "argocd/guestbook-cluster2" {
			return nil, errors.New("not found")
		}
		return app, nil
	}
	tgt, err := resolveTarget(context.Background(), env{EnvAppName: "guestbook-cluster2", EnvAppNamespace: "argocd"}.get, read)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(tgt.Clusters, ",") != "cluster2" || tgt.Namespace != "guestbook" || tgt.AppSet != "argocd/guestbook" {
		t.Errorf("target %+v, want cluster2, the destination namespace and the owning ApplicationSet", tgt)
	}

	// TARGET_CLUSTER wins and the Application is not read.
	asked = ""
	tgt, err = resolveTarget(context.Background(), env{EnvAppName: "guestbook-cluster2", EnvAppNamespace: "argocd", EnvTargetCluster: "cluster1"}.get, read)
	if err != nil || asked != "" || tgt.Clusters[0] != "cluster1" {
		t.Errorf("target %+v, err %v, read %q: want TARGET_CLUSTER without reading the Application", tgt, err, asked)
	}

	// An Application without the annotation is a missing target, with the reason.
	app.SetAnnotations(nil)
	if _, err := resolveTarget(context.Background(), env{EnvAppName: "guestbook-cluster2", EnvAppNamespace: "argocd"}.get, read); !errors.Is(err, errNoTarget) {
		t.Errorf("error %v, want no target cluster", err)
	}
	_, err = resolveTarget(context.Background(), env{EnvAppName: "other", EnvAppNamespace: "argocd"}.get, read)
	if err == nil || !strings.Contains(err.Error(), "reading the Application argocd/other: not found") {
		t.Errorf("error %v, want the failed read named", err)
	}
}

func TestWriteWorksRoundTrips(t *testing.T) {
	works, err := generate(t, source("guestbook"), env{EnvAppName: "guestbook", EnvTargetCluster: "a,b", EnvTargetNamespace: "guestbook"})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteWorks(&buf, works); err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(buf.String(), "---\n")
	if len(docs) != 2 {
		t.Fatalf("%d documents, want 2", len(docs))
	}
	for i, d := range docs {
		if strings.Contains(d, "creationTimestamp") || strings.Contains(d, "status:") {
			t.Errorf("document %d carries an empty status or creationTimestamp:\n%s", i, d)
		}
		back := &workv1.ManifestWork{}
		if err := yaml.UnmarshalStrict([]byte(d), back); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		if back.Namespace != works[i].Namespace || len(back.Spec.Workload.Manifests) != len(works[i].Spec.Workload.Manifests) {
			t.Errorf("document %d reads back as %s with %d manifests", i, back.Namespace, len(back.Spec.Workload.Manifests))
		}
	}
}
