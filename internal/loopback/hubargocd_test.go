package loopback

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// screenshotEnv names a file the UI test also writes its screenshot of the applications page to.
const screenshotEnv = "ARGOCD_PULL_UI_SCREENSHOT"

// TestHubArgoCD: the hub's argocd-server serves Argo CD's real web UI embedded in the binary, the admin
// logs in with the password StartHubArgoCD set, the API lists the hub's Applications, and headless Chromium
// runs the UI's scripts: the login page draws its form, and a logged-in browser draws the applications list.
func TestHubArgoCD(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	env, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			env.KeepDir()
			t.Logf("logs kept in %s", env.Dir)
		}
		env.Stop()
	}()
	argo, err := StartHubArgoCD(ctx, env.Hub, HubArgoCDOptions{Dir: filepath.Join(env.Dir, "argocd-hub")})
	if err != nil {
		t.Fatal(err)
	}
	defer argo.Stop()

	apps := dynamic.NewForConfigOrDie(env.Hub.Config()).Resource(schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "applications"})
	app := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
		"metadata": map[string]any{"name": "guestbook-cluster1", "namespace": argo.Namespace},
		"spec": map[string]any{
			"project":     "default",
			"source":      map[string]any{"repoURL": "http://127.0.0.1:1/apps.git", "path": "guestbook", "targetRevision": "main"},
			"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": "guestbook"},
		},
	}}
	if _, err := apps.Namespace(argo.Namespace).Create(ctx, app, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The UI's index.html and one of its script bundles come from the binary.
	index := get(ctx, t, argo.URL+"/", "")
	if !strings.Contains(index, "<title>Argo CD</title>") {
		t.Fatalf("index.html is not Argo CD's UI:\n%s", index)
	}
	bundle := regexp.MustCompile(`src="([^"]*main\.[0-9a-f]+\.js)"`).FindStringSubmatch(index)
	if bundle == nil {
		t.Fatalf("no main script bundle in index.html:\n%s", index)
	}
	if js := get(ctx, t, argo.URL+"/"+strings.TrimPrefix(bundle[1], "/"), ""); len(js) < 100_000 {
		t.Fatalf("script bundle %s has only %d bytes", bundle[1], len(js))
	}

	// A wrong password is refused; the right one gives a session that reads the Application.
	wrong := *argo
	wrong.AdminPassword = "not-" + argo.AdminPassword
	if _, err := wrong.Login(ctx); err == nil {
		t.Fatal("login with a wrong password succeeded")
	}
	token, err := argo.Login(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if list := get(ctx, t, argo.URL+"/api/v1/applications", token); !strings.Contains(list, `"guestbook-cluster1"`) {
		t.Fatalf("the API does not list the Application:\n%s", list)
	}

	browser, err := NewBrowser(env.Dir)
	if err != nil {
		t.Fatal(err)
	}
	login, err := browser.Open(ctx, argo.URL+"/login", 1440, 900)
	if err != nil {
		t.Fatal(err)
	}
	defer login.Close()
	if dom, err := login.WaitDOM(ctx, 3*time.Minute, DOMContains(`name="username"`, `name="password"`)); err != nil {
		t.Fatalf("the login page drew no login form: %v\n%.2000s", err, dom)
	}
	// A browser that is logged in: a loopback proxy adds the session cookie the UI would have set.
	target, err := url.Parse(argo.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	direct := proxy.Director
	proxy.Director = func(r *http.Request) {
		direct(r)
		r.Header.Set("Cookie", "argocd.token="+token)
	}
	session := httptest.NewServer(proxy)
	defer session.Close()
	list, err := browser.Open(ctx, session.URL+"/applications", 1440, 900)
	if err != nil {
		t.Fatal(err)
	}
	defer list.Close()
	if dom, err := list.WaitDOM(ctx, 3*time.Minute, DOMContains("guestbook-cluster1")); err != nil {
		t.Fatalf("the applications page does not show the Application: %v\n%.2000s", err, dom)
	}
	png := filepath.Join(env.Dir, "applications.png")
	if path := os.Getenv(screenshotEnv); path != "" {
		png = path
	}
	if err := list.Screenshot(ctx, png); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the applications page: %s", png)
}

// get fetches a URL (with a bearer token when given) and returns its body; anything but 200 fails the test.
func get(ctx context.Context, t *testing.T, u, token string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", u, resp.Status, body)
	}
	return string(body)
}
