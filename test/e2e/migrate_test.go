package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	toolscache "k8s.io/client-go/tools/cache"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/demo"
	"github.com/argocd-pull/argocd-pull/internal/localfleet"
	"github.com/argocd-pull/argocd-pull/internal/migratecmd"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// The Placement and the ApplicationSet of OCM's own pull-model example (open-cluster-management-io/
// argocd-pull-integration, example/hub/guestbook-app-placement.yaml, clusterset-binding.yaml and
// example/guestbook-app-set.yaml), as written there, but for the repository URL, which points at the fleet's git
// server instead of github.com: the repository holds the same guestbook-ui Deployment and Service.
const (
	exampleBinding   = `{"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding", "metadata": {"name": "global", "namespace": "argocd"}, "spec": {"clusterSet": "global"}}`
	examplePlacement = `{"apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement", "metadata": {"name": "guestbook-app-placement", "namespace": "argocd"}, "spec": {}}`
	exampleAppSet    = `{
  "apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet",
  "metadata": {"name": "guestbook-app-set", "namespace": "argocd"},
  "spec": {
    "generators": [{"clusterDecisionResource": {
      "configMapRef": "ocm-placement-generator",
      "labelSelector": {"matchLabels": {"cluster.open-cluster-management.io/placement": "guestbook-app-placement"}},
      "requeueAfterSeconds": 30}}],
    "template": {
      "metadata": {
        "name": "{{name}}-guestbook-app",
        "labels": {"apps.open-cluster-management.io/pull-to-ocm-managed-cluster": "true"},
        "annotations": {
          "argocd.argoproj.io/skip-reconcile": "true",
          "apps.open-cluster-management.io/ocm-managed-cluster": "{{name}}",
          "apps.open-cluster-management.io/ocm-managed-cluster-app-namespace": "argocd"}},
      "spec": {
        "project": "default",
        "source": {"repoURL": %q, "targetRevision": "HEAD", "path": "guestbook"},
        "destination": {"server": "https://kubernetes.default.svc", "namespace": "guestbook"},
        "syncPolicy": {"automated": {"prune": true}, "syncOptions": ["CreateNamespace=true"]}}}}}`
)

// maxStale is how long a hub Application may show something else than its cluster's Application (sync, health,
// revision) at any time of a move: the hub's status must stay current while the works change transport.
const maxStale = 30 * time.Second

// TestMigrate: OCM's own pull-model example (a ManagedClusterSetBinding, a Placement that OCM's placement
// controller decides, an ApplicationSet over it) deploys the guestbook with real Argo CD to two clusters in the
// basic mode; then `argocd-pull migrate` moves the fleet to the Maestro mode, once killed (SIGKILL) half-way and
// run again, and back to the basic mode, one cluster first. Every managed cluster's Application keeps its uid, no
// Application or deployed resource is ever deleted on a cluster (their informers see no deletion), and the hub's
// statuses follow the clusters' throughout, a new git revision included.
func TestMigrate(t *testing.T) {
	ctx := context.Background()
	f := startFleet(t, localfleet.Options{Clusters: clusters, Transport: workclient.TransportKube,
		MigrationTransport: workclient.TransportGRPC, ArgoCD: true})
	hub := must[client.Client](t)(f.HubClient())
	spokes := map[string]client.Client{}
	for _, c := range clusters {
		spokes[c] = must[client.Client](t)(f.ClusterClient(c))
	}
	if err := f.Git.Commit(ctx, "guestbook", "guestbook", demo.Guestbook); err != nil {
		t.Fatal(err)
	}

	// OCM's example, as a user applies it: OCM decides the Placement, nothing else is written by hand.
	for _, doc := range []string{exampleBinding, examplePlacement, fmt.Sprintf(exampleAppSet, f.Git.URL("guestbook"))} {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON([]byte(doc)); err != nil {
			t.Fatal(err)
		}
		if err := hub.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	if err := localfleet.WaitPlaced(ctx, hub, localfleet.ArgoCDNamespace, "guestbook-app-placement", len(clusters)); err != nil {
		t.Fatal(err)
	}
	apps := map[string]string{}
	for _, c := range clusters {
		apps[c] = c + "-guestbook-app"
	}
	waitSyncedHealthy(t, hub, spokes, apps)
	expectWorks(t, f, hub, workclient.TransportKube, len(clusters))

	// What must not change: the uid of every Application, Deployment and Service on the clusters.
	uids := spokeUIDs(t, spokes, apps)
	deletions := watchDeletions(t, f)
	stale := watchStaleness(t, hub, spokes, apps)

	migrate := func(args ...string) *exec.Cmd {
		cmd := exec.Command(binary, append([]string{"migrate", "--kubeconfig", f.Env.Hub.Kubeconfig,
			"--server", "https://" + f.Server.HTTP, "--token-file", f.AdminTokenFile(), "--ca-file", f.CAFile(),
			"--cluster-timeout", "3m"}, args...)...) //nolint:gosec // the binary built for this test
		return cmd
	}
	run := func(args ...string) (string, error) {
		out, err := migrate(args...).CombinedOutput()
		t.Logf("argocd-pull migrate %s:\n%s", strings.Join(args, " "), out)
		return string(out), err
	}

	// The plan, without a change.
	out, err := run("--to", "grpc", "--dry-run")
	if err != nil || !strings.Contains(out, "copy 1 work to grpc, switch to grpc, orphan and remove the 1 work on kube") || !strings.Contains(out, "dry run") {
		t.Fatalf("dry run: %v", err)
	}
	expectLabels(t, hub, map[string]string{"cluster1": "", "cluster2": ""})

	// No grpc agent runs yet, and cluster2 is not a consumer of the server: the command registers it, says what is
	// missing and changes nothing.
	if err := f.ServerClient().DeleteConsumer(ctx, "cluster2"); err != nil {
		t.Fatal(err)
	}
	out, err = run("--to", "grpc")
	if err == nil || !strings.Contains(out, "cluster cluster1: no agent is subscribed") || !strings.Contains(out, "registered cluster cluster2") {
		t.Fatalf("migrate without grpc agents: err = %v", err)
	}
	expectLabels(t, hub, map[string]string{"cluster1": "", "cluster2": ""})

	// The grpc agents start beside the kube ones. A migrate killed once the first cluster's works are being
	// copied, run again, completes.
	for _, c := range clusters {
		if err := f.StartAgentDriver(ctx, c, workclient.TransportGRPC); err != nil {
			t.Fatal(err)
		}
	}
	testutil.EventuallyWithin(t, time.Minute, "the grpc agents subscribed", func() error {
		for _, c := range clusters {
			consumer, err := f.ServerClient().GetConsumer(ctx, c)
			if err != nil {
				return err
			}
			if consumer.ConnectedAgents == nil || *consumer.ConnectedAgents == 0 {
				return fmt.Errorf("consumer %s: %v agents", c, consumer.ConnectedAgents)
			}
		}
		return nil
	})
	killMidway(t, hub, migrate("--to", "grpc", "--parallel", "1"))
	out, err = run("--to", "grpc")
	if err != nil || !strings.Contains(out, "(resumed)") || !strings.Contains(out, "==> 2 clusters on grpc") {
		t.Fatalf("migrate to grpc after a kill: %v", err)
	}
	expectLabels(t, hub, map[string]string{"cluster1": "grpc", "cluster2": "grpc"})
	expectWorks(t, f, hub, workclient.TransportGRPC, len(clusters))
	expectUIDs(t, spokes, apps, uids)

	// The hub follows a new revision through the Maestro mode.
	newRevision(t, f, hub, spokes, apps)

	// Back to the basic mode: one cluster, then the rest.
	if out, err = run("--to", "kube", "--cluster", "cluster1"); err != nil || !strings.Contains(out, "==> 1 cluster on kube") {
		t.Fatalf("migrate cluster1 to kube: %v", err)
	}
	expectLabels(t, hub, map[string]string{"cluster1": "kube", "cluster2": "grpc"})
	if out, err = run("--to", "kube"); err != nil || !strings.Contains(out, "==> 2 clusters on kube") {
		t.Fatalf("migrate to kube: %v", err)
	}
	expectLabels(t, hub, map[string]string{"cluster1": "kube", "cluster2": "kube"})
	expectWorks(t, f, hub, workclient.TransportKube, len(clusters))
	expectUIDs(t, spokes, apps, uids)
	newRevision(t, f, hub, spokes, apps)

	if d := deletions(); len(d) > 0 {
		t.Errorf("deleted on the managed clusters: %v", d)
	}
	longest := stale()
	t.Logf("longest time a hub Application differed from its cluster's: %s", longest.Round(time.Second))
	if longest > maxStale {
		t.Errorf("a hub Application's status was stale for %s (bound %s)", longest.Round(time.Second), maxStale)
	}

	// The watch of deletions sees them: without the ApplicationSet, the Applications leave the clusters.
	appset := &unstructured.Unstructured{}
	appset.SetAPIVersion(argocd.ApplicationSetGVK.GroupVersion().String())
	appset.SetKind(argocd.ApplicationSetGVK.Kind)
	appset.SetNamespace(localfleet.ArgoCDNamespace)
	appset.SetName("guestbook-app-set")
	if err := hub.Delete(ctx, appset); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, 2*time.Minute, "the deletion of the Applications seen on the clusters", func() error {
		seen := 0
		for _, d := range deletions() {
			if strings.Contains(d, "Application argocd/") && strings.HasSuffix(d, " deleted") {
				seen++
			}
		}
		if seen != len(clusters) {
			return fmt.Errorf("deletions seen: %v", deletions())
		}
		return nil
	})
}

// killMidway starts a migrate and kills it (SIGKILL) as soon as a cluster's works are being copied; it checks
// the move was left half-way.
func killMidway(t *testing.T, hub client.Client, cmd *exec.Cmd) {
	t.Helper()
	out := &testutil.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, 2*time.Minute, "a cluster being copied", func() error {
		list := &clusterv1.ManagedClusterList{}
		if err := hub.List(context.Background(), list); err != nil {
			return err
		}
		for _, mc := range list.Items {
			if mc.Labels[workclient.LabelCopyTo] != "" {
				return nil
			}
		}
		return fmt.Errorf("no cluster is being copied yet; output so far:\n%s", out.String())
	})
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	t.Logf("argocd-pull migrate killed half-way; its output:\n%s", out.String())
	if strings.Contains(out.String(), "2 clusters on grpc") {
		t.Fatal("the migrate finished before it was killed")
	}
}

// expectLabels checks the transport label of each cluster ("" for none) and that no move is under way.
func expectLabels(t *testing.T, hub client.Client, want map[string]string) {
	t.Helper()
	for c, transport := range want {
		mc := &clusterv1.ManagedCluster{}
		if err := hub.Get(context.Background(), client.ObjectKey{Name: c}, mc); err != nil {
			t.Fatal(err)
		}
		if mc.Labels[workclient.LabelTransport] != transport || mc.Labels[workclient.LabelCopyTo] != "" ||
			mc.Labels[workclient.LabelRetire] != "" || mc.Annotations[migratecmd.AnnotationUIDs] != "" {
			t.Fatalf("cluster %s: labels %v, annotations %v; want transport %q and no move", c, mc.Labels, mc.Annotations, transport)
		}
	}
}

// expectWorks checks that the works are all on one transport: n there, none on the other.
func expectWorks(t *testing.T, f *localfleet.System, hub client.Client, transport string, n int) {
	t.Helper()
	testutil.EventuallyWithin(t, time.Minute, fmt.Sprintf("%d works, all on %s", n, transport), func() error {
		works := &workv1.ManifestWorkList{}
		if err := hub.List(context.Background(), works, client.MatchingLabels{argocd.LabelPull: "true"}); err != nil {
			return err
		}
		bundles, err := f.ServerClient().CountResourceBundles(context.Background())
		if err != nil {
			return err
		}
		want := map[string]int{workclient.TransportKube: 0, workclient.TransportGRPC: 0}
		want[transport] = n
		if len(works.Items) != want[workclient.TransportKube] || bundles != want[workclient.TransportGRPC] {
			return fmt.Errorf("%d ManifestWorks on the hub, %d works on the server", len(works.Items), bundles)
		}
		return nil
	})
}

// waitSyncedHealthy waits until every hub Application is Synced and Healthy.
func waitSyncedHealthy(t *testing.T, hub client.Client, spokes map[string]client.Client, apps map[string]string) {
	t.Helper()
	for c, name := range apps {
		testutil.EventuallyWithin(t, 4*time.Minute, name+" Synced and Healthy on the hub", func() error {
			app := argocd.NewApplication()
			if err := get(context.Background(), hub, app, localfleet.ArgoCDNamespace, name); err != nil {
				return err
			}
			if s, h := nested(app, "status", "sync", "status"), nested(app, "status", "health", "status"); s != "Synced" || h != "Healthy" {
				return fmt.Errorf("sync=%q health=%q status=%v", s, h, app.Object["status"])
			}
			return get(context.Background(), spokes[c], &corev1.Service{}, "guestbook", "guestbook-ui")
		})
	}
}

// watched are the objects on the managed clusters whose uids must not change and which must never be deleted.
var watched = []struct {
	gvr       schema.GroupVersionResource
	namespace string
}{
	{argocd.ApplicationGVK.GroupVersion().WithResource("applications"), localfleet.ArgoCDNamespace},
	{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, "guestbook"},
	{schema.GroupVersionResource{Version: "v1", Resource: "services"}, "guestbook"},
}

// spokeUIDs returns the uid of each cluster's Application, Deployment and Service.
func spokeUIDs(t *testing.T, spokes map[string]client.Client, apps map[string]string) map[string]string {
	t.Helper()
	uids := map[string]string{}
	for c, spoke := range spokes {
		deployment := &unstructured.Unstructured{}
		deployment.SetAPIVersion("apps/v1")
		deployment.SetKind("Deployment")
		for _, o := range []struct {
			obj       client.Object
			namespace string
			name      string
		}{
			{argocd.NewApplication(), localfleet.ArgoCDNamespace, apps[c]},
			{deployment, "guestbook", "guestbook-ui"},
			{&corev1.Service{}, "guestbook", "guestbook-ui"},
		} {
			if err := get(context.Background(), spoke, o.obj, o.namespace, o.name); err != nil {
				t.Fatal(err)
			}
			uids[fmt.Sprintf("%s: %T %s/%s", c, o.obj, o.namespace, o.name)] = string(o.obj.GetUID())
		}
	}
	return uids
}

func expectUIDs(t *testing.T, spokes map[string]client.Client, apps, want map[string]string) {
	t.Helper()
	got := spokeUIDs(t, spokes, apps)
	for k, uid := range want {
		if got[k] != uid {
			t.Errorf("%s: uid %s, was %s: re-created", k, got[k], uid)
		}
	}
}

// watchDeletions records every deletion (a deletion timestamp set, or the object gone) of the watched objects on
// every cluster until the test ends; the returned function lists them.
func watchDeletions(t *testing.T, f *localfleet.System) func() []string {
	t.Helper()
	var mu sync.Mutex
	var deleted []string
	record := func(cluster string, obj any, how string) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			mu.Lock()
			deleted = append(deleted, fmt.Sprintf("%s: %s %s/%s %s", cluster, u.GetKind(), u.GetNamespace(), u.GetName(), how))
			mu.Unlock()
		}
	}
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	for _, c := range clusters {
		dyn, err := dynamic.NewForConfig(f.Env.Cluster(c).Config())
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range watched {
			inf := dynamicinformer.NewFilteredDynamicInformer(dyn, w.gvr, w.namespace, 0, toolscache.Indexers{}, nil).Informer()
			_, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
				UpdateFunc: func(_, n any) {
					if u, ok := n.(*unstructured.Unstructured); ok && u.GetDeletionTimestamp() != nil {
						record(c, n, "marked for deletion")
					}
				},
				DeleteFunc: func(o any) { record(c, o, "deleted") },
			})
			if err != nil {
				t.Fatal(err)
			}
			go inf.Run(stop)
			if !toolscache.WaitForCacheSync(stop, inf.HasSynced) {
				t.Fatal("informer did not sync")
			}
		}
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), deleted...)
	}
}

// watchStaleness compares, every half second until the test ends, each hub Application's sync, health and
// revision with its cluster's Application, and returns a function that tells the longest time they differed.
func watchStaleness(t *testing.T, hub client.Client, spokes map[string]client.Client, apps map[string]string) func() time.Duration {
	t.Helper()
	var mu sync.Mutex
	var longest time.Duration
	since := map[string]time.Time{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	view := func(c client.Client, name string) (string, error) {
		app := argocd.NewApplication()
		if err := get(ctx, c, app, localfleet.ArgoCDNamespace, name); err != nil {
			return "", err
		}
		return strings.Join([]string{nested(app, "status", "sync", "status"), nested(app, "status", "health", "status"),
			nested(app, "status", "sync", "revision")}, "/"), nil
	}
	go func() {
		for ctx.Err() == nil {
			for c, name := range apps {
				h, err1 := view(hub, name)
				s, err2 := view(spokes[c], name)
				if err1 != nil || err2 != nil {
					continue
				}
				mu.Lock()
				if h == s {
					delete(since, c)
				} else if _, ok := since[c]; !ok {
					since[c] = time.Now()
				} else if d := time.Since(since[c]); d > longest {
					longest = d
				}
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range since {
			longest = max(longest, time.Since(s))
		}
		return longest
	}
}

// newRevision commits a change to the guestbook and waits until every cluster deployed it and its hub
// Application shows the new revision.
func newRevision(t *testing.T, f *localfleet.System, hub client.Client, spokes map[string]client.Client, apps map[string]string) {
	t.Helper()
	ctx := context.Background()
	files := map[string]string{}
	for k, v := range demo.Guestbook {
		files[k] = v
	}
	at := time.Now().Format(time.RFC3339Nano)
	files["guestbook/revision.yaml"] = fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: revision\ndata:\n  at: %q\n", at)
	if err := f.Git.Commit(ctx, "guestbook", "a new revision", files); err != nil {
		t.Fatal(err)
	}
	for c, name := range apps {
		// A hard refresh from the hub reaches the cluster's Argo CD through the works.
		testutil.EventuallyWithin(t, 30*time.Second, "refresh "+name, func() error {
			app := argocd.NewApplication()
			if err := get(ctx, hub, app, localfleet.ArgoCDNamespace, name); err != nil {
				return err
			}
			ann := app.GetAnnotations()
			ann[argocd.AnnotationRefresh] = "hard"
			app.SetAnnotations(ann)
			return hub.Update(ctx, app)
		})
		testutil.EventuallyWithin(t, 3*time.Minute, name+" at the new revision on the cluster and the hub", func() error {
			cm := &corev1.ConfigMap{}
			if err := get(ctx, spokes[c], cm, "guestbook", "revision"); err != nil || cm.Data["at"] != at {
				return fmt.Errorf("ConfigMap revision on %s: %v %v", c, cm.Data, err)
			}
			spokeApp, hubApp := argocd.NewApplication(), argocd.NewApplication()
			if err := get(ctx, spokes[c], spokeApp, localfleet.ArgoCDNamespace, name); err != nil {
				return err
			}
			if err := get(ctx, hub, hubApp, localfleet.ArgoCDNamespace, name); err != nil {
				return err
			}
			rev := nested(spokeApp, "status", "sync", "revision")
			if got := nested(hubApp, "status", "sync", "revision"); got != rev || nested(hubApp, "status", "sync", "status") != "Synced" {
				return fmt.Errorf("hub revision %s (%s), cluster revision %s", got, nested(hubApp, "status", "sync", "status"), rev)
			}
			return nil
		})
	}
}
