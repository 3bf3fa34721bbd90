package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/localfleet"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// cmpRepo is the git repository of the CMP test: a guestbook of plain YAML and a Kustomize app (base + overlay).
var cmpRepo = map[string]string{
	"guestbook/guestbook-ui-deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: guestbook-ui
spec:
  replicas: 1
  progressDeadlineSeconds: 15
  selector:
    matchLabels: {app: guestbook-ui}
  template:
    metadata:
      labels: {app: guestbook-ui}
    spec:
      containers:
      - name: guestbook-ui
        image: gcr.io/heptio-images/ks-guestbook-demo:0.2
        ports:
        - containerPort: 80
`,
	"guestbook/guestbook-ui-svc.yaml": `apiVersion: v1
kind: Service
metadata:
  name: guestbook-ui
spec:
  ports:
  - port: 80
    targetPort: 80
  selector:
    app: guestbook-ui
`,
	"podinfo/base/kustomization.yaml": "resources:\n- deployment.yaml\nlabels:\n- pairs:\n    app: podinfo\n  includeSelectors: true\n",
	"podinfo/base/deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: podinfo
spec:
  replicas: 1
  template:
    spec:
      containers:
      - name: podinfo
        image: ghcr.io/stefanprodan/podinfo:6.7.0
`,
	"podinfo/overlay/kustomization.yaml": "namespace: podinfo\nresources:\n- ../base\n- namespace.yaml\nreplicas:\n- name: podinfo\n  count: 2\n" +
		"configMapGenerator:\n- name: podinfo-settings\n  literals:\n  - COLOR=blue\n",
	"podinfo/overlay/namespace.yaml": "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: podinfo\n",
}

// cmpAppSet reads an ApplicationSet of the CMP variant from config/samples (the guestbook one, as shipped) and
// points it at the test's repository; for the Kustomize app it changes the name and path and drops the
// namespace settings (the overlay sets its own).
func cmpAppSet(t *testing.T, repoURL, app string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile("../../config/samples/guestbook-cmp-applicationset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(strings.ReplaceAll(string(data), "REPO_URL", repoURL)), &u.Object); err != nil {
		t.Fatal(err)
	}
	if app == "podinfo" {
		u.SetName("podinfo-cmp")
		_ = unstructured.SetNestedField(u.Object, "{{name}}-podinfo-cmp", "spec", "template", "metadata", "name")
		_ = unstructured.SetNestedField(u.Object, "podinfo/overlay", "spec", "template", "spec", "source", "path")
		_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"name": "TARGET_CLUSTER", "value": "{{name}}"}},
			"spec", "template", "spec", "source", "plugin", "env")
	}
	return u
}

// TestCMPVariant: the CMP variant on real components. The hub runs Argo CD's application controller, repo
// server and argocd-pull's plugin in argocd-cmp-server; the managed clusters run only the OCM work agent (and the
// controllers, scheduler and KWOK node that run Deployments). ApplicationSets over a Placement deploy a plain
// YAML guestbook and a Kustomize app to two clusters (OCM's placement controller decides the Placement on the
// hub, and the ApplicationSet controller reads its decisions as on a real hub). The hub
// Applications are Synced and Healthy because the ManifestWork health check says so; a Deployment broken on a
// cluster shows on the hub with its message; a manifest that cannot be parsed is a ComparisonError that leaves
// the cluster as it was; a manifest removed from git is removed from the clusters; deleting the Applications
// removes everything.
func TestCMPVariant(t *testing.T) {
	ctx := context.Background()
	f := startFleet(t, localfleet.Options{Clusters: clusters, Transport: workclient.TransportKube, ArgoCD: true, CMP: true})
	hub := must[client.Client](t)(f.HubClient())
	spokes := map[string]client.Client{}
	for _, c := range clusters {
		spokes[c] = must[client.Client](t)(f.ClusterClient(c))
	}
	argo := newArgoAPI(t, ctx, f)
	if err := f.Git.Commit(ctx, "apps", "guestbook and podinfo", cmpRepo); err != nil {
		t.Fatal(err)
	}
	for _, app := range []string{"guestbook", "podinfo"} {
		if err := hub.Create(ctx, cmpAppSet(t, f.Git.URL("apps"), app)); err != nil {
			t.Fatal(err)
		}
	}

	// 1. Both apps on both clusters: Synced and Healthy on the hub, from the ManifestWork's health.
	for _, c := range clusters {
		for _, app := range []string{"guestbook", "podinfo"} {
			name := c + "-" + app + "-cmp"
			testutil.EventuallyWithin(t, 5*time.Minute, name+" Synced and Healthy", func() error {
				return argo.expectCMPApp(ctx, hub, name, "Synced", "Healthy", "resources applied and available on cluster "+c)
			})
		}
		expectDeploymentReady(t, ctx, spokes[c], "guestbook", "guestbook-ui", 1)
		expectDeploymentReady(t, ctx, spokes[c], "podinfo", "podinfo", 2)
		if err := get(ctx, spokes[c], &corev1.Namespace{}, "", "argocd"); !apierrors.IsNotFound(err) {
			t.Errorf("%s has an argocd namespace (%v): the CMP variant needs no Argo CD on managed clusters", c, err)
		}
	}

	// 2. A Deployment that cannot roll out on cluster1 (its new Pods fit no node): Progressing, then Degraded
	// with the Deployment's own message; cluster2 stays Healthy. Fixed, it is Healthy again.
	patchDeployment(t, ctx, spokes["cluster1"], "guestbook", "guestbook-ui",
		`{"spec":{"template":{"spec":{"nodeSelector":{"e2e.argocd-pull.io/broken":"true"}}}}}`)
	testutil.EventuallyWithin(t, 3*time.Minute, "cluster1-guestbook-cmp Degraded", func() error {
		return argo.expectCMPApp(ctx, hub, "cluster1-guestbook-cmp", "Synced", "Degraded",
			`Deployment guestbook/guestbook-ui: Deployment "guestbook-ui" exceeded its progress deadline`)
	})
	if err := argo.expectCMPApp(ctx, hub, "cluster2-guestbook-cmp", "Synced", "Healthy", ""); err != nil {
		t.Errorf("cluster2: %v", err)
	}
	patchDeployment(t, ctx, spokes["cluster1"], "guestbook", "guestbook-ui", `{"spec":{"template":{"spec":{"nodeSelector":null}}}}`)
	testutil.EventuallyWithin(t, 3*time.Minute, "cluster1-guestbook-cmp Healthy again", func() error {
		return argo.expectCMPApp(ctx, hub, "cluster1-guestbook-cmp", "Synced", "Healthy", "")
	})

	// 3. A manifest that cannot be parsed: a ComparisonError with the plugin's message; the work and the
	// clusters stay as they were.
	commitAndRefresh(t, ctx, f, hub, map[string]string{
		"guestbook/extra.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\ndata: [unclosed\n",
	}, "a manifest that cannot be parsed")
	for _, c := range clusters {
		testutil.EventuallyWithin(t, 2*time.Minute, c+": ComparisonError", func() error {
			app := argocd.NewApplication()
			if err := get(ctx, hub, app, localfleet.ArgoCDNamespace, c+"-guestbook-cmp"); err != nil {
				return err
			}
			if msg := conditionMessage(app, "ComparisonError"); !strings.Contains(msg, "extra.yaml, document 1: cannot be parsed") {
				return fmt.Errorf("ComparisonError %q", msg)
			}
			return nil
		})
		if err := get(ctx, spokes[c], &corev1.Service{}, "guestbook", "guestbook-ui"); err != nil {
			t.Errorf("%s: the guestbook went away with a broken commit: %v", c, err)
		}
	}

	// 4. The broken file and the Service removed from git: Argo CD syncs the smaller work (auto-sync with prune)
	// and the work agent deletes the Service from both clusters.
	commitAndRefresh(t, ctx, f, hub, map[string]string{"guestbook/extra.yaml": "", "guestbook/guestbook-ui-svc.yaml": ""}, "remove the Service")
	for _, c := range clusters {
		testutil.EventuallyWithin(t, 3*time.Minute, c+": Service pruned", func() error {
			err := get(ctx, spokes[c], &corev1.Service{}, "guestbook", "guestbook-ui")
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("service still there (%v)", err)
			}
			return argo.expectCMPApp(ctx, hub, c+"-guestbook-cmp", "Synced", "Healthy", "")
		})
	}

	// 5. Deleting the ApplicationSets deletes the Applications; Argo CD deletes their ManifestWorks (resources
	// finalizer) and the work agents delete everything they applied, except the namespace CREATE_NAMESPACE added.
	for _, name := range []string{"guestbook-cmp", "podinfo-cmp"} {
		appset := &unstructured.Unstructured{}
		appset.SetGroupVersionKind(argocd.ApplicationSetGVK)
		appset.SetNamespace(localfleet.ArgoCDNamespace)
		appset.SetName(name)
		if err := hub.Delete(ctx, appset); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range clusters {
		testutil.EventuallyWithin(t, 3*time.Minute, c+": Applications, works and resources gone", func() error {
			works := &workv1.ManifestWorkList{}
			if err := hub.List(ctx, works, client.InNamespace(c)); err != nil {
				return err
			}
			if len(works.Items) > 0 {
				return fmt.Errorf("%d works left in %s", len(works.Items), c)
			}
			for _, app := range []string{"guestbook", "podinfo"} {
				if err := get(ctx, hub, argocd.NewApplication(), localfleet.ArgoCDNamespace, c+"-"+app+"-cmp"); !apierrors.IsNotFound(err) {
					return fmt.Errorf("application %s-%s-cmp still there (%v)", c, app, err)
				}
			}
			for _, d := range []struct{ ns, name string }{{"guestbook", "guestbook-ui"}, {"podinfo", "podinfo"}} {
				if err := get(ctx, spokes[c], &appsv1.Deployment{}, d.ns, d.name); !apierrors.IsNotFound(err) {
					return fmt.Errorf("deployment %s/%s still there (%v)", d.ns, d.name, err)
				}
			}
			// podinfo's Namespace came from git and goes (terminating is enough: its controller finishes it);
			// guestbook's came from CREATE_NAMESPACE and stays, as Argo CD leaves a namespace it created.
			ns := &corev1.Namespace{}
			if err := get(ctx, spokes[c], ns, "", "podinfo"); err == nil && ns.DeletionTimestamp.IsZero() {
				return fmt.Errorf("namespace podinfo still there")
			}
			if err := get(ctx, spokes[c], ns, "", "guestbook"); err != nil || !ns.DeletionTimestamp.IsZero() {
				return fmt.Errorf("namespace guestbook: %v, deleting %v; want it left", err, ns.DeletionTimestamp)
			}
			return nil
		})
	}
}

// argoAPI reads the hub's Argo CD API (argocd-server, as its web UI does) with an admin session.
type argoAPI struct {
	url, token string
}

func newArgoAPI(t *testing.T, ctx context.Context, f *localfleet.System) *argoAPI {
	t.Helper()
	token, err := f.HubArgoCD.Login(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &argoAPI{url: f.HubArgoCD.URL, token: token}
}

// workHealth returns the health of the Application's ManifestWork in its resource tree: what the hub's UI shows
// on the work's node.
func (a *argoAPI) workHealth(ctx context.Context, app string) (status, message string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.url+"/api/v1/applications/"+app+"/resource-tree", nil)
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", "", err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("resource tree of %s: %s", app, resp.Status)
	}
	var tree struct {
		Nodes []struct {
			Kind   string `json:"kind"`
			Health struct {
				Status  string `json:"status"`
				Message string `json:"message"`
			} `json:"health"`
		} `json:"nodes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tree); err != nil {
		return "", "", err
	}
	for _, n := range tree.Nodes {
		if n.Kind == "ManifestWork" {
			return n.Health.Status, n.Health.Message, nil
		}
	}
	return "", "", fmt.Errorf("no ManifestWork in the resource tree of %s", app)
}

// expectCMPApp checks a hub Application's sync (empty: any) and health, and that the health message of its
// ManifestWork, as the hub's Argo CD UI shows it, contains message.
func (a *argoAPI) expectCMPApp(ctx context.Context, hub client.Client, name, sync, health, message string) error {
	app := argocd.NewApplication()
	if err := get(ctx, hub, app, localfleet.ArgoCDNamespace, name); err != nil {
		return err
	}
	s, h := nested(app, "status", "sync", "status"), nested(app, "status", "health", "status")
	workHealth, workMessage, err := a.workHealth(ctx, name)
	if err != nil {
		return err
	}
	if (sync != "" && s != sync) || h != health || workHealth != health || !strings.Contains(workMessage, message) {
		return fmt.Errorf("sync=%q health=%q, ManifestWork %q %q; conditions %v", s, h, workHealth, workMessage,
			app.Object["status"].(map[string]any)["conditions"])
	}
	return nil
}

func expectDeploymentReady(t *testing.T, ctx context.Context, c client.Client, ns, name string, replicas int32) {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := get(ctx, c, d, ns, name); err != nil {
		t.Fatalf("deployment %s/%s: %v", ns, name, err)
	}
	if d.Status.ReadyReplicas != replicas {
		t.Errorf("deployment %s/%s has %d ready replicas, want %d", ns, name, d.Status.ReadyReplicas, replicas)
	}
}

func patchDeployment(t *testing.T, ctx context.Context, c client.Client, ns, name, patch string) {
	t.Helper()
	d := &appsv1.Deployment{}
	d.SetNamespace(ns)
	d.SetName(name)
	if err := c.Patch(ctx, d, client.RawPatch(types.StrategicMergePatchType, []byte(patch))); err != nil {
		t.Fatalf("patch deployment %s/%s: %v", ns, name, err)
	}
}

// commitAndRefresh commits files and asks Argo CD to refresh the guestbook Applications now rather than at its
// next poll of git.
func commitAndRefresh(t *testing.T, ctx context.Context, f *localfleet.System, hub client.Client, files map[string]string, message string) {
	t.Helper()
	if err := f.Git.Commit(ctx, "apps", message, files); err != nil {
		t.Fatal(err)
	}
	for _, c := range clusters {
		app := argocd.NewApplication()
		app.SetNamespace(localfleet.ArgoCDNamespace)
		app.SetName(c + "-guestbook-cmp")
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"hard"}}}`, argocd.AnnotationRefresh)
		if err := hub.Patch(ctx, app, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatal(err)
		}
	}
}
