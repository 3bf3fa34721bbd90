package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/demo"
	"github.com/argocd-pull/argocd-pull/internal/localfleet"
	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// ScreenshotEnv names where TestHubConsole saves its screenshot of a pulled Application's resource tree in the
// hub's web UI (docs/images/hub-console-tree.png in the repository when unset).
const consoleScreenshotEnv = "ARGOCD_PULL_CONSOLE_SCREENSHOT"

// consoleApp is the Application TestHubConsole's ApplicationSet generates from the git directory apps/guestbook.
const consoleApp = "guestbook-console"

// TestHubConsole drives the hub's real argocd-server, with its web UI, over an Application pulled to a managed
// cluster that runs a real Argo CD, a Deployment controller, a scheduler and KWOK: the resource tree has the
// Deployment's ReplicaSet and Pod, managed resources give live and target state, the live manifest, the events
// and the pod's log come back, all from the cluster through the console (argocd-pull server's redis proxy and
// kube proxy, the agent's console stream), the CLI's resources, live manifests, diff and logs work, and the web
// UI draws the tree with its Pod. The Application comes from a Git-generator ApplicationSet, which the hub's
// ApplicationSet controller expands with the hub's repo server.
func TestHubConsole(t *testing.T) {
	ctx := context.Background()
	f := startFleet(t, localfleet.Options{Clusters: []string{"cluster1"}, Transport: workclient.TransportGRPC, ArgoCD: true})
	hub := must[client.Client](t)(f.HubClient())
	files := map[string]string{
		"apps/guestbook/guestbook-creds.yaml": "apiVersion: v1\nkind: Secret\nmetadata:\n  name: guestbook-creds\nstringData:\n  password: not-for-the-hub\n",
	}
	for path, content := range demo.Guestbook {
		files["apps/"+path] = content
	}
	if err := f.Git.Commit(ctx, "console", "guestbook", files); err != nil {
		t.Fatal(err)
	}
	if err := hub.Create(ctx, gitGeneratorAppSet(f.Git.URL("console"))); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, 5*time.Minute, "the generated Application Synced and Healthy on the hub", func() error {
		app := argocd.NewApplication()
		if err := get(ctx, hub, app, localfleet.ArgoCDNamespace, consoleApp); err != nil {
			return err
		}
		if s, h := nested(app, "status", "sync", "status"), nested(app, "status", "health", "status"); s != "Synced" || h != "Healthy" {
			return fmt.Errorf("sync=%q health=%q", s, h)
		}
		return nil
	})

	token := must[string](t)(f.HubArgoCD.Login(ctx))
	api := func(path string) (string, error) { return argocdAPI(ctx, f.HubArgoCD.URL+path, token) }
	q := "?appNamespace=" + localfleet.ArgoCDNamespace

	// The resource tree: the Deployment's ReplicaSet and Pod come from the cluster's Argo CD.
	var tree struct {
		Nodes []struct {
			Kind, Name, Namespace, UID string
			Group                      string
		} `json:"nodes"`
	}
	testutil.EventuallyWithin(t, 2*time.Minute, "the tree with a Pod", func() error {
		body, err := api("/api/v1/applications/" + consoleApp + "/resource-tree" + q)
		if err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(body), &tree); err != nil {
			return err
		}
		kinds := map[string]bool{}
		for _, n := range tree.Nodes {
			kinds[n.Kind] = true
		}
		for _, k := range []string{"Deployment", "ReplicaSet", "Pod", "Service", "Secret"} {
			if !kinds[k] {
				return fmt.Errorf("no %s in the tree: %s", k, body)
			}
		}
		return nil
	})
	uid := map[string]string{}
	pod := ""
	for _, n := range tree.Nodes {
		uid[n.Kind] = n.UID
		if n.Kind == "Pod" {
			pod = n.Name
		}
	}

	// Managed resources: live and target state of each resource, Secret values hidden.
	body := must[string](t)(api("/api/v1/applications/" + consoleApp + "/managed-resources" + q))
	var managed struct {
		Items []struct{ Kind, Name, LiveState, TargetState string } `json:"items"`
	}
	if err := json.Unmarshal([]byte(body), &managed); err != nil {
		t.Fatal(err)
	}
	for _, item := range managed.Items {
		if item.LiveState == "" || item.LiveState == "null" || item.TargetState == "" {
			t.Errorf("managed resource %s %s lacks live or target state", item.Kind, item.Name)
		}
	}
	if len(managed.Items) != 3 || strings.Contains(body, "not-for-the-hub") || strings.Contains(body, "bm90LWZvci10aGUtaHVi") {
		t.Errorf("managed resources: %d items, Secret data in them: %v", len(managed.Items), strings.Contains(body, "bm90LWZvci10aGUtaHVi"))
	}

	// The live manifest of the Deployment and of the Pod, read from the cluster.
	resource := func(group, kind, name string) string {
		return "/api/v1/applications/" + consoleApp + "/resource" + q + "&namespace=guestbook&version=v1&group=" + group +
			"&kind=" + kind + "&resourceName=" + name
	}
	live := must[string](t)(api(resource("apps", "Deployment", "guestbook-ui")))
	if !strings.Contains(live, `availableReplicas`) || !strings.Contains(live, uid["Deployment"]) {
		t.Errorf("live manifest of the Deployment: %.500s", live)
	}
	if live := must[string](t)(api(resource("", "Pod", pod))); !strings.Contains(live, `\"phase\":\"Running\"`) {
		t.Errorf("live manifest of the Pod: %.500s", live)
	}
	if live := must[string](t)(api(resource("", "Secret", "guestbook-creds"))); strings.Contains(live, "bm90LWZvci10aGUtaHVi") {
		t.Errorf("the Secret's data reached the hub: %.500s", live)
	}

	// Events of the Deployment and of the Pod, from the cluster's controllers and scheduler.
	events := func(kind, name string) string {
		return must[string](t)(api("/api/v1/applications/" + consoleApp + "/events" + q + "&resourceNamespace=guestbook&resourceName=" +
			name + "&resourceUID=" + uid[kind]))
	}
	if e := events("Deployment", "guestbook-ui"); !strings.Contains(e, "ScalingReplicaSet") {
		t.Errorf("events of the Deployment: %.500s", e)
	}
	if e := events("Pod", pod); !strings.Contains(e, "Scheduled") {
		t.Errorf("events of the Pod: %.500s", e)
	}

	// The pod's log, from KWOK's kubelet endpoint on the cluster.
	logs := must[string](t)(api("/api/v1/applications/" + consoleApp + "/logs" + q + "&namespace=guestbook&podName=" + pod +
		"&container=guestbook-ui&tailLines=10&follow=false"))
	if !strings.Contains(logs, loopback.PodLogMarker) {
		t.Errorf("pod log: %.500s", logs)
	}
	// Followed, as the UI's log viewer asks for it: the first lines arrive while the stream stays open.
	if err := argocdStreamUntil(ctx, f.HubArgoCD.URL+"/api/v1/applications/"+consoleApp+"/logs"+q+"&namespace=guestbook&podName="+pod+
		"&container=guestbook-ui&tailLines=10&follow=true", token, loopback.PodLogMarker); err != nil {
		t.Errorf("followed pod log: %v", err)
	}

	// The CLI against the hub.
	cli := argocdCLI(t, f)
	if out := cli(ctx, "app", "resources", consoleApp); !strings.Contains(out, "guestbook-ui") || !strings.Contains(out, "Secret") {
		t.Errorf("argocd app resources:\n%s", out)
	}
	if out := cli(ctx, "app", "manifests", consoleApp, "--source", "live"); !strings.Contains(out, "availableReplicas") {
		t.Errorf("argocd app manifests --source live:\n%.1000s", out)
	}
	cli(ctx, "app", "diff", consoleApp) // exits 0: the cluster matches git
	if out := cli(ctx, "app", "logs", consoleApp, "--kind", "Deployment", "--name", "guestbook-ui", "--tail", "5"); !strings.Contains(out, loopback.PodLogMarker) {
		t.Errorf("argocd app logs:\n%s", out)
	}

	// The web UI draws the tree with the Pod.
	checkTreeInBrowser(ctx, t, f, token, pod)
}

// gitGeneratorAppSet is an ApplicationSet with a Git directory generator over apps/* of repoURL, generating
// pulled Applications for cluster1.
func gitGeneratorAppSet(repoURL string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(argocd.ApplicationSetGVK)
	u.SetNamespace(localfleet.ArgoCDNamespace)
	u.SetName("console")
	u.Object["spec"] = map[string]any{
		"generators": []any{map[string]any{"git": map[string]any{"repoURL": repoURL, "revision": "main",
			"directories": []any{map[string]any{"path": "apps/*"}}}}},
		"template": map[string]any{
			"metadata": map[string]any{
				"name":   "{{path.basename}}-console",
				"labels": map[string]any{argocd.LabelPull: "true"},
				"annotations": map[string]any{argocd.AnnotationSkipReconcile: "true", argocd.AnnotationManagedCluster: "cluster1",
					argocd.AnnotationAppNamespace: localfleet.ArgoCDNamespace},
			},
			"spec": map[string]any{
				"project":     "default",
				"source":      map[string]any{"repoURL": repoURL, "targetRevision": "main", "path": "{{path}}"},
				"destination": map[string]any{"server": argocd.ClusterServerURL("cluster1"), "namespace": "guestbook"},
				"syncPolicy":  map[string]any{"automated": map[string]any{}, "syncOptions": []any{"CreateNamespace=true"}},
			},
		},
	}
	return u
}

// argocdAPI GETs an argocd-server API path with a session token and returns the body of a 200; a streamed
// answer (pod logs) is read until argocd-server ends it.
func argocdAPI(ctx context.Context, u, token string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	var b strings.Builder
	_, err = io.Copy(&b, bufio.NewReader(resp.Body))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %.500s", u, resp.Status, b.String())
	}
	return b.String(), err
}

// argocdStreamUntil GETs a streamed argocd-server API path and returns once the stream carries want.
func argocdStreamUntil(ctx context.Context, u, token, want string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.Contains(sc.Text(), want) {
			return nil
		}
	}
	return fmt.Errorf("the stream ended without %q: %v", want, sc.Err())
}

// checkTreeInBrowser opens the Application's page in headless Chromium, logged in, checks that the resource
// tree draws the Pod, and saves a screenshot.
func checkTreeInBrowser(ctx context.Context, t *testing.T, f *localfleet.System, token, pod string) {
	t.Helper()
	browser := must[*loopback.Browser](t)(loopback.NewBrowser(f.Dir))
	target := must[*url.URL](t)(url.Parse(f.HubArgoCD.URL))
	proxy := httputil.NewSingleHostReverseProxy(target)
	// Chromium is stopped with the page's event streams open; their cut is no news.
	proxy.ErrorLog = log.New(io.Discard, "", 0)
	direct := proxy.Director
	proxy.Director = func(r *http.Request) {
		direct(r)
		r.Header.Set("Cookie", "argocd.token="+token)
	}
	session := httptest.NewServer(proxy)
	defer session.Close()
	page := must[*loopback.Page](t)(browser.Open(ctx, session.URL+"/applications/"+localfleet.ArgoCDNamespace+"/"+consoleApp+"?view=tree", 1800, 900))
	defer page.Close()
	if _, err := page.WaitDOM(ctx, 3*time.Minute, loopback.DOMContains("application-resource-tree", pod, "guestbook-ui")); err != nil {
		t.Fatalf("the web UI's tree with the Pod: %v", err)
	}
	png := os.Getenv(consoleScreenshotEnv)
	if png == "" {
		root := must[string](t)(loopback.ModuleRoot())
		png = filepath.Join(root, "docs", "images", "hub-console-tree.png")
	}
	if err := os.MkdirAll(filepath.Dir(png), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := page.Screenshot(ctx, png); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the pulled Application's tree: %s", png)
}
