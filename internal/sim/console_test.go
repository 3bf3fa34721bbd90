package sim

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/consoleapi"
)

// TestConsoleAnswers: a simulated cluster answers the console from its simulated Argo CD: the tree of an
// Application it holds (a Deployment with its ReplicaSet and Pod), its managed resources, the live object of a
// resource in the tree; an Application it does not hold and an object outside every tree are refused.
func TestConsoleAnswers(t *testing.T) {
	f := &Fleet{cfg: Config{Argo: ArgoConfig{ResourcesPerApp: 3}}}
	c := &cluster{name: "c1", works: map[string]*simWork{}}
	sw := &simWork{name: "w1", hasApp: true, app: app{name: "app1", namespace: "argocd", destination: []byte(`{"namespace":"gb"}`)}}
	c.works[sw.name], c.list = sw, []*simWork{sw}

	tree := decodeAnswer(t, f.consoleAnswer(c, &consoleapi.Request{Cache: &consoleapi.CacheRequest{Op: consoleapi.CacheGet,
		Entry: argocd.CacheEntryTree, Namespace: "argocd", Name: "app1"}}))
	var nodes struct {
		Nodes []map[string]any `json:"nodes"`
	}
	if err := json.Unmarshal(tree, &nodes); err != nil {
		t.Fatal(err)
	}
	var pod string
	kinds := map[string]bool{}
	for _, n := range nodes.Nodes {
		kinds[n["kind"].(string)] = true
		if n["kind"] == "Pod" {
			pod = n["name"].(string)
		}
	}
	for _, k := range []string{"ConfigMap", "Deployment", "ReplicaSet", "Pod", "Service"} {
		if !kinds[k] {
			t.Errorf("no %s in the simulated tree: %s", k, tree)
		}
	}
	managed := decodeAnswer(t, f.consoleAnswer(c, &consoleapi.Request{Cache: &consoleapi.CacheRequest{Op: consoleapi.CacheGet,
		Entry: argocd.CacheEntryManagedResources, Namespace: "argocd", Name: "app1"}}))
	if !strings.Contains(string(managed), `"liveState"`) || !strings.Contains(string(managed), `"targetState"`) {
		t.Errorf("managed resources: %s", managed)
	}
	live := f.consoleAnswer(c, &consoleapi.Request{Kube: &consoleapi.KubeRequest{Method: http.MethodGet,
		Path: "/api/v1/namespaces/gb/pods/" + pod}})
	if live.Code != http.StatusOK || !strings.Contains(string(live.Body), pod) {
		t.Errorf("live pod: %d %s", live.Code, live.Body)
	}
	for _, req := range []*consoleapi.Request{
		{Cache: &consoleapi.CacheRequest{Op: consoleapi.CacheGet, Entry: argocd.CacheEntryTree, Namespace: "argocd", Name: "other"}},
		{Kube: &consoleapi.KubeRequest{Method: http.MethodGet, Path: "/api/v1/namespaces/gb/pods/not-in-a-tree"}},
	} {
		if resp := f.consoleAnswer(c, req); resp.Code != http.StatusForbidden {
			t.Errorf("%+v answered %d", req, resp.Code)
		}
	}
}

func decodeAnswer(t *testing.T, resp *consoleapi.Response) []byte {
	t.Helper()
	if resp.Code != http.StatusOK {
		t.Fatalf("answer %d: %s", resp.Code, resp.Message)
	}
	r, err := gzip.NewReader(bytes.NewReader(resp.Body))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
