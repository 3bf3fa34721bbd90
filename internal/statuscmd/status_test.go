package statuscmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/hubmanager"
	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

var env *loopback.Env

func TestMain(m *testing.M) {
	os.Exit(testutil.Main(m, loopback.Options{}, &env))
}

func hubClient(t *testing.T) client.Client {
	t.Helper()
	return testutil.Client(t, env.Hub.Config(), hubmanager.Scheme())
}

// createApp creates a hub Application for cluster (pull-model unless pull is false), owned by appSet when it
// is not nil, with a status.
func createApp(t *testing.T, c client.Client, ns string, appSet *unstructured.Unstructured, name, cluster string, pull bool, status map[string]any) {
	t.Helper()
	app := argocd.NewApplication()
	app.SetNamespace(ns)
	app.SetName(name)
	if pull {
		app.SetLabels(map[string]string{argocd.LabelPull: "true"})
	}
	app.SetAnnotations(map[string]string{argocd.AnnotationManagedCluster: cluster})
	if appSet != nil {
		app.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "argoproj.io/v1alpha1", Kind: "ApplicationSet", Name: appSet.GetName(), UID: appSet.GetUID()}})
	}
	app.Object["spec"] = map[string]any{
		"project":     "default",
		"source":      map[string]any{"repoURL": "http://git.example/repo.git", "path": "guestbook"},
		"destination": map[string]any{"server": argocd.InClusterServer, "namespace": "guestbook"},
	}
	if err := c.Create(context.Background(), app); err != nil {
		t.Fatal(err)
	}
	if status != nil {
		setStatus(t, c, ns, name, status)
	}
}

// setStatus writes an Application's status as the controller does (a JSON patch of the main resource).
func setStatus(t *testing.T, c client.Client, ns, name string, status map[string]any) {
	t.Helper()
	data, err := json.Marshal([]map[string]any{{"op": "add", "path": "/status", "value": status}})
	if err != nil {
		t.Fatal(err)
	}
	app := argocd.NewApplication()
	app.SetNamespace(ns)
	app.SetName(name)
	if err := c.Patch(context.Background(), app, client.RawPatch(types.JSONPatchType, data)); err != nil {
		t.Fatal(err)
	}
}

func appStatus(sync, health string, conditions ...string) map[string]any {
	s := map[string]any{
		"sync":   map[string]any{"status": sync, "revision": "9f8e7d6c5b4a39281706f5e4d3c2b1a098765432"},
		"health": map[string]any{"status": health},
	}
	var list []any
	for i := 0; i+1 < len(conditions); i += 2 {
		list = append(list, map[string]any{"type": conditions[i], "message": conditions[i+1]})
	}
	if list != nil {
		s["conditions"] = list
	}
	return s
}

// fleet creates, in namespace ns, ApplicationSet guestbook with three Applications, ApplicationSet billing
// with one, a standalone pull-model Application, and an Application that is not pull-model.
func fleet(t *testing.T, c client.Client, ns string) {
	t.Helper()
	testutil.CreateNamespace(t, c, ns)
	guestbook := testutil.CreateAppSet(t, c, ns, "guestbook")
	billing := testutil.CreateAppSet(t, c, ns, "billing")
	createApp(t, c, ns, guestbook, "guestbook-cluster-1", "cluster-1", true, appStatus("Synced", "Healthy"))
	createApp(t, c, ns, guestbook, "guestbook-cluster-2", "cluster-2", true, appStatus("OutOfSync", "Degraded",
		"SyncError", "Failed sync attempt: one or more objects failed to apply"))
	createApp(t, c, ns, guestbook, "guestbook-cluster-3", "cluster-3", true, nil)
	createApp(t, c, ns, billing, "billing-cluster-1", "cluster-1", true, appStatus("Synced", "Progressing"))
	createApp(t, c, ns, nil, "standalone", "cluster-2", true, appStatus("Synced", "Healthy"))
	createApp(t, c, ns, nil, "hub-only", "", false, appStatus("Synced", "Healthy"))
}

func kubeconfig(t *testing.T) string {
	t.Helper()
	path, err := env.Hub.WriteKubeconfig("admin")
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// run runs `argocd-pull status` with the given options and returns its standard output and error.
func run(t *testing.T, mutate func(*Options)) (string, string) {
	t.Helper()
	o := NewOptions()
	o.Kubeconfig = kubeconfig(t)
	o.PageSize = 2 // several pages
	var out, errOut bytes.Buffer
	o.Out, o.ErrOut = &out, &errOut
	mutate(o)
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := o.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String()
}

func TestRunGolden(t *testing.T) {
	c := hubClient(t)
	fleet(t, c, "status-golden")
	tests := []struct {
		name   string
		mutate func(*Options)
	}{
		{name: "run-namespace", mutate: func(o *Options) { o.Namespace = "status-golden" }},
		{name: "run-appset-wide", mutate: func(o *Options) { o.Namespace, o.AppSet, o.Output = "status-golden", "guestbook", OutputWide }},
		{name: "run-appset-yaml", mutate: func(o *Options) { o.Namespace, o.AppSet, o.Output = "status-golden", "billing", OutputYAML }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _ := run(t, tt.mutate)
			golden(t, tt.name, []byte(out))
		})
	}
}

func TestRunAllNamespaces(t *testing.T) {
	c := hubClient(t)
	fleet(t, c, "status-all-1")
	fleet(t, c, "status-all-2")
	out, _ := run(t, func(*Options) {})
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	normalized := strings.Join(lines, "\n")
	for _, want := range []string{
		"NAMESPACE APPLICATIONSET CLUSTERS SYNCED NOT SYNCED HEALTHY NOT HEALTHY IN PROGRESS",
		"status-all-1 guestbook 3 1 2 1 2 0",
		"status-all-2 billing 1 1 0 0 1 1",
		"status-all-2 guestbook-cluster-2 guestbook cluster-2 OutOfSync Degraded Failed sync attempt: one or more objects failed to apply",
	} {
		if !strings.Contains(normalized, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hub-only") {
		t.Errorf("output shows an Application that is not pull-model:\n%s", out)
	}
}

func TestRunNoneFound(t *testing.T) {
	c := hubClient(t)
	testutil.CreateNamespace(t, c, "status-empty")
	out, errOut := run(t, func(o *Options) { o.Namespace = "status-empty" })
	if out != "" || errOut != "No pull-model Applications found in namespace status-empty.\n" {
		t.Errorf("out %q, err %q", out, errOut)
	}
}

func TestRunWatch(t *testing.T) {
	c := hubClient(t)
	const ns = "status-watch"
	fleet(t, c, ns)
	o := NewOptions()
	o.Kubeconfig = kubeconfig(t)
	o.Namespace, o.AppSet, o.Watch = ns, "guestbook", true
	out := &testutil.SyncBuffer{}
	o.Out, o.ErrOut = out, out
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	// waitFor waits for a line with these columns, whatever the spaces between them.
	waitFor := func(line string) {
		t.Helper()
		testutil.Eventually(t, "a line "+line, func() error {
			for _, l := range strings.Split(out.String(), "\n") {
				if strings.Join(strings.Fields(l), " ") == line {
					return nil
				}
			}
			return fmt.Errorf("output lacks the line %q:\n%s", line, out.String())
		})
	}
	waitFor("ADDED guestbook-cluster-3 guestbook cluster-3 Unknown Unknown")

	setStatus(t, c, ns, "guestbook-cluster-3", appStatus("Synced", "Healthy"))
	waitFor("MODIFIED guestbook-cluster-3 guestbook cluster-3 Synced Healthy")

	// A change the view does not show prints nothing; Applications of other ApplicationSets print nothing.
	setStatus(t, c, ns, "billing-cluster-1", appStatus("OutOfSync", "Degraded"))
	app := argocd.NewApplication()
	app.SetNamespace(ns)
	app.SetName("guestbook-cluster-1")
	if err := c.Delete(context.Background(), app); err != nil {
		t.Fatal(err)
	}
	waitFor("DELETED guestbook-cluster-1 guestbook cluster-1 Synced Healthy")
	if strings.Contains(out.String(), "billing") {
		t.Errorf("the watch shows another ApplicationSet:\n%s", out.String())
	}
	if n := strings.Count(out.String(), "MODIFIED"); n != 1 {
		t.Errorf("%d MODIFIED lines, want 1:\n%s", n, out.String())
	}
	t.Logf("watch output:\n%s", out.String())
}
