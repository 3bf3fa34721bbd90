package e2e

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/localfleet"
	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// TestArgoCDCLI drives the real argocd CLI (v3.2.11) against the hub's argocd-server over a pulled Application
// whose managed cluster runs a real Argo CD: `argocd app sync` returns with the operation that ran on the
// cluster, `argocd app wait` returns once the hub shows Synced and Healthy, and `argocd app get --hard-refresh`
// returns once the refresh has reached the cluster's Argo CD.
func TestArgoCDCLI(t *testing.T) {
	ctx := context.Background()
	f := startFleet(t, localfleet.Options{Clusters: []string{"cluster1"}, Transport: workclient.TransportGRPC, ArgoCD: true})
	hub := must[client.Client](t)(f.HubClient())
	spoke := must[client.Client](t)(f.ClusterClient("cluster1"))
	if err := f.Git.Commit(ctx, "cli", "guestbook", map[string]string{
		"guestbook/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: guestbook\ndata:\n  color: green\n",
	}); err != nil {
		t.Fatal(err)
	}
	const name = "cli-guestbook"
	app := argocd.NewApplication()
	app.SetNamespace(localfleet.ArgoCDNamespace)
	app.SetName(name)
	app.SetLabels(map[string]string{argocd.LabelPull: "true"})
	app.SetAnnotations(map[string]string{argocd.AnnotationSkipReconcile: "true", argocd.AnnotationManagedCluster: "cluster1"})
	app.Object["spec"] = map[string]any{
		"project":     "default",
		"source":      map[string]any{"repoURL": f.Git.URL("cli"), "targetRevision": "main", "path": "guestbook"},
		"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": "guestbook"},
		"syncPolicy":  map[string]any{"syncOptions": []any{"CreateNamespace=true"}},
	}
	if err := hub.Create(ctx, app); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, 3*time.Minute, "OutOfSync on the hub (manual sync policy)", func() error {
		app := argocd.NewApplication()
		if err := get(ctx, hub, app, localfleet.ArgoCDNamespace, name); err != nil {
			return err
		}
		if s := nested(app, "status", "sync", "status"); s != "OutOfSync" {
			return fmt.Errorf("sync=%q", s)
		}
		return nil
	})

	cli := argocdCLI(t, f)
	out := cli(ctx, "app", "sync", name, "--timeout", "120")
	for _, want := range []string{"Operation:          Sync", "Phase:              Succeeded", "Sync Status:        Synced"} {
		if !strings.Contains(out, want) {
			t.Errorf("argocd app sync output lacks %q:\n%s", want, out)
		}
	}
	cli(ctx, "app", "wait", name, "--timeout", "120")
	synced := argocd.NewApplication()
	if err := get(ctx, hub, synced, localfleet.ArgoCDNamespace, name); err != nil {
		t.Fatal(err)
	}
	if s, h := nested(synced, "status", "sync", "status"), nested(synced, "status", "health", "status"); s != "Synced" || h != "Healthy" {
		t.Fatalf("after argocd app wait the hub shows sync=%q health=%q", s, h)
	}
	if u, _, _ := unstructured.NestedString(synced.Object, "status", "operationState", "operation", "initiatedBy", "username"); u != "admin" {
		t.Fatalf("the hub's operation state is not the admin's sync: %v", synced.Object["status"].(map[string]any)["operationState"])
	}

	// A hard refresh: the CLI returns when the hub's annotation is gone, which happens once the cluster's agent
	// applied it; the cluster's Argo CD then reconciles the Application.
	time.Sleep(1100 * time.Millisecond) // reconciledAt has a resolution of one second
	asked := time.Now().UTC().Truncate(time.Second)
	cli(ctx, "app", "get", name, "--hard-refresh")
	testutil.EventuallyWithin(t, time.Minute, "the cluster's Argo CD reconciled after the hard refresh", func() error {
		app := argocd.NewApplication()
		if err := get(ctx, spoke, app, localfleet.ArgoCDNamespace, name); err != nil {
			return err
		}
		at, err := time.Parse(time.RFC3339, nested(app, "status", "reconciledAt"))
		if err != nil || at.Before(asked) {
			return fmt.Errorf("the cluster's reconciledAt %q is before the refresh at %s", nested(app, "status", "reconciledAt"), asked)
		}
		return nil
	})
}

// argocdCLI returns a runner of the real argocd CLI logged in to the hub's argocd-server as admin; a command
// that exits non-zero fails the test.
func argocdCLI(t *testing.T, f *localfleet.System) func(ctx context.Context, args ...string) string {
	t.Helper()
	bin := must[string](t)(loopback.Binary("argocd"))
	token := must[string](t)(f.HubArgoCD.Login(context.Background()))
	server := must[*url.URL](t)(url.Parse(f.HubArgoCD.URL))
	home := t.TempDir()
	return func(ctx context.Context, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		shown := "argocd " + strings.Join(args, " ")
		args = append(args, "--server", server.Host, "--plaintext", "--grpc-web", "--auth-token", token, "--config", home+"/config")
		cmd := exec.CommandContext(ctx, bin, args...) //nolint:gosec // the argocd CLI built by make setup
		cmd.Env = append(os.Environ(), "HOME="+home)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v after %s\n%s", shown, err, time.Since(start).Round(time.Millisecond), out)
		}
		t.Logf("%s: %s", shown, time.Since(start).Round(time.Millisecond))
		return string(out)
	}
}
