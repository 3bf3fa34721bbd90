package badinput

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/application"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/localfleet"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// appCase is a bad Application and what its author sees: the hub apiserver's rejection, or a condition on the
// hub Application (argocd-pull's, with a Warning event, or the managed cluster's Argo CD's).
type appCase struct {
	kind string
	// namespace of the hub Application; argocd when empty.
	namespace string
	mutate    func(e *env, app *unstructured.Unstructured)
	// rejected is the apiserver's error; condition and message the condition otherwise.
	rejected           string
	condition, message string
	// fromCluster: the condition comes from the managed cluster's Argo CD, not from argocd-pull (no event).
	fromCluster bool
	// after runs once the Application is created (the cluster's side of an input).
	after func(t *testing.T, e *env, name string)
	// syncOnHub is the sync status the hub Application shows all the same, when the case has one.
	syncOnHub string
}

// Names the cases use.
const (
	ghostCluster = "ghost"
	localCluster = "hub-itself"
	otherTeam    = "team-a"
	quietNS      = "not-argocd"
)

func applicationCases() []appCase {
	annotate := func(key, value string) func(*env, *unstructured.Unstructured) {
		return func(_ *env, app *unstructured.Unstructured) {
			a := app.GetAnnotations()
			a[key] = value
			app.SetAnnotations(a)
		}
	}
	remove := func(path ...string) func(*env, *unstructured.Unstructured) {
		return func(_ *env, app *unstructured.Unstructured) { unstructured.RemoveNestedField(app.Object, path...) }
	}
	set := func(value any, path ...string) func(*env, *unstructured.Unstructured) {
		return func(_ *env, app *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(app.Object, value, path...)
		}
	}
	return []appCase{
		{kind: "Application without a destination", mutate: remove("spec", "destination"), rejected: "spec.destination: Required value"},
		{kind: "Application without a project", mutate: remove("spec", "project"), rejected: "spec.project: Required value"},
		{kind: "source without a repoURL", mutate: remove("spec", "source", "repoURL"), rejected: "spec.source.repoURL: Required value"},
		{kind: "pull label without the cluster annotation", mutate: func(_ *env, app *unstructured.Unstructured) {
			a := app.GetAnnotations()
			delete(a, argocd.AnnotationManagedCluster)
			app.SetAnnotations(a)
		}, condition: argocd.ConditionInvalidSpec,
			message: "annotation apps.open-cluster-management.io/ocm-managed-cluster is missing or empty: the Application names no managed cluster"},
		{kind: "blank cluster annotation", mutate: annotate(argocd.AnnotationManagedCluster, "  "), condition: argocd.ConditionInvalidSpec,
			message: "annotation apps.open-cluster-management.io/ocm-managed-cluster is missing or empty"},
		{kind: "cluster-app-namespace annotation that is no namespace name", mutate: annotate(argocd.AnnotationAppNamespace, "Bad_Namespace"),
			condition: argocd.ConditionInvalidSpec, message: `"Bad_Namespace" is not a valid namespace name`},
		{kind: "project that does not exist on the hub (or is no project name)", mutate: set("Bad_Project", "spec", "project"),
			condition: argocd.ConditionInvalidSpec, message: "AppProject Bad_Project does not exist in namespace argocd on the hub"},
		{kind: "Application too large for a work (over 512 KiB)", mutate: set(strings.Repeat("x", application.MaxWorkBytes), "spec", "source", "helm", "values"),
			condition: argocd.ConditionInvalidSpec, message: "too large to deliver"},
		{kind: "cluster that the server does not know (no consumer)", mutate: annotate(argocd.AnnotationManagedCluster, ghostCluster),
			condition: argocd.ConditionUnknownCluster, message: fmt.Sprintf("cluster %q is not known to the transport", ghostCluster)},
		{kind: "cluster not placed for the Application's namespace", namespace: otherTeam, condition: argocd.ConditionClusterNotPermitted,
			message: "no PlacementDecision in namespace team-a selects cluster cluster1: an Application may only target clusters placed for its namespace"},
		{kind: "the hub itself as the cluster (label local-cluster=true)", mutate: annotate(argocd.AnnotationManagedCluster, localCluster),
			condition: argocd.ConditionDeliveryWarning, message: "cluster hub-itself is the hub itself (label local-cluster=true); delivery to it is turned off (--enable-local-cluster)"},
		{kind: "repository that does not exist", mutate: func(e *env, app *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(app.Object, e.Git.URL("does-not-exist"), "spec", "source", "repoURL")
		}, condition: "ComparisonError", fromCluster: true, message: "repository not found"},
		{kind: "path that does not exist in the repository", mutate: set("no/such/path", "spec", "source", "path"),
			condition: "ComparisonError", fromCluster: true, message: "no/such/path: app path does not exist"},
		{kind: "status section over the agent's limit (1 MiB)", mutate: annotate(argocd.AnnotationAppNamespace, quietNS),
			condition: argocd.ConditionDeliveryWarning, after: writeHugeStatus,
			syncOnHub: "Synced",
			message: "part of the status from cluster cluster1 is missing: Sync status feedback failed with error the length of returned json " +
				"raw string for name status.resources is larger than the maximum length 1048576"},
	}
}

// TestApplicationInputs creates each bad Application next to a good one and checks what its author sees; the
// good one is delivered and Synced and Healthy all the same.
func TestApplicationInputs(t *testing.T) {
	e := fleet(t)
	ctx := context.Background()
	prepareApplicationCases(t, e)
	good := e.application("good", "")
	if err := e.hub.Create(ctx, good); err != nil {
		t.Fatal(err)
	}
	cases := applicationCases()
	for i, c := range cases {
		app := e.application(fmt.Sprintf("bad-%02d", i), c.namespace)
		if c.mutate != nil {
			c.mutate(e, app)
		}
		err := e.hub.Create(ctx, app)
		switch {
		case c.rejected != "" && (err == nil || !strings.Contains(err.Error(), c.rejected)):
			t.Errorf("%s: created with %v, want the apiserver's %q", c.kind, err, c.rejected)
		case c.rejected == "" && err != nil:
			t.Fatalf("%s: %v", c.kind, err)
		case c.after != nil:
			c.after(t, e, app.GetName())
		}
	}
	for i, c := range cases {
		if c.rejected != "" {
			continue
		}
		t.Run(strings.ReplaceAll(c.kind, " ", "_"), func(t *testing.T) {
			ns, name := localfleet.ArgoCDNamespace, fmt.Sprintf("bad-%02d", i)
			if c.namespace != "" {
				ns = c.namespace
			}
			testutil.EventuallyWithin(t, 2*time.Minute, c.condition+" on the hub Application", func() error {
				return e.hasCondition(ctx, ns, name, c.condition, c.message)
			})
			if c.syncOnHub != "" {
				app := argocd.NewApplication()
				if err := e.hub.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, app); err != nil {
					t.Fatal(err)
				}
				if sync, _, _ := unstructured.NestedString(app.Object, "status", "sync", "status"); sync != c.syncOnHub {
					t.Errorf("sync status on the hub %q, want %q", sync, c.syncOnHub)
				}
			}
			if c.fromCluster {
				return
			}
			testutil.EventuallyWithin(t, 30*time.Second, "a Warning event", func() error { return e.hasWarning(ctx, ns, name, c.condition) })
		})
	}
	testutil.EventuallyWithin(t, 2*time.Minute, "the good Application Synced and Healthy on the hub", func() error {
		app := argocd.NewApplication()
		if err := e.hub.Get(ctx, client.ObjectKeyFromObject(good), app); err != nil {
			return err
		}
		sync, _, _ := unstructured.NestedString(app.Object, "status", "sync", "status")
		health, _, _ := unstructured.NestedString(app.Object, "status", "health", "status")
		if sync != "Synced" || health != "Healthy" {
			return fmt.Errorf("%s/%s", sync, health)
		}
		return nil
	})
}

// prepareApplicationCases sets up the hub for the cases: the ghost cluster placed (so that the server's answer,
// not the tenancy gate, is what its Application sees), the other team's namespace with no placement, and a
// ManagedCluster that is the hub itself.
func prepareApplicationCases(t *testing.T, e *env) {
	t.Helper()
	ctx := context.Background()
	testutil.CreateNamespace(t, e.hub, otherTeam)
	mc := &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: localCluster, Labels: map[string]string{argocd.LabelLocalCluster: "true"}},
		Spec: clusterv1.ManagedClusterSpec{HubAcceptsClient: true}}
	if err := e.hub.Create(ctx, mc); err != nil {
		t.Fatal(err)
	}
	pd := &clusterv1beta1.PlacementDecision{ObjectMeta: metav1.ObjectMeta{Namespace: localfleet.ArgoCDNamespace, Name: "ghost-decision",
		Labels: map[string]string{clusterv1beta1.PlacementLabel: "ghost"}}}
	if err := e.hub.Create(ctx, pd); err != nil {
		t.Fatal(err)
	}
	pd.Status.Decisions = []clusterv1beta1.ClusterDecision{{ClusterName: ghostCluster}}
	if err := e.hub.Status().Update(ctx, pd); err != nil {
		t.Fatal(err)
	}
}

// application is a good pull-model Application for the fleet's cluster: a ConfigMap from the fleet's git server.
func (e *env) application(name, namespace string) *unstructured.Unstructured {
	if namespace == "" {
		namespace = localfleet.ArgoCDNamespace
	}
	app := argocd.NewApplication()
	app.SetNamespace(namespace)
	app.SetName(name)
	app.SetLabels(map[string]string{argocd.LabelPull: "true"})
	app.SetAnnotations(map[string]string{
		argocd.AnnotationManagedCluster: cluster,
		argocd.AnnotationAppNamespace:   localfleet.ArgoCDNamespace,
		argocd.AnnotationSkipReconcile:  "true",
	})
	app.Object["spec"] = map[string]any{
		"project":     "default",
		"source":      map[string]any{"repoURL": e.repoURL, "targetRevision": "main", "path": "config"},
		"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": "catalogue-" + name},
		"syncPolicy":  map[string]any{"automated": map[string]any{"prune": true}, "syncOptions": []any{"CreateNamespace=true"}},
	}
	return app
}

// hasCondition returns nil when the hub Application has a condition of the type whose message contains want.
func (e *env) hasCondition(ctx context.Context, ns, name, typ, want string) error {
	app := argocd.NewApplication()
	if err := e.hub.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, app); err != nil {
		return err
	}
	conds, _, _ := unstructured.NestedSlice(app.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if msg, _ := m["message"].(string); m["type"] == typ && strings.Contains(msg, want) {
			return nil
		}
	}
	return fmt.Errorf("conditions %v, want %s with %q", conds, typ, want)
}

// hasWarning returns nil when a Warning event with the reason is about the Application.
func (e *env) hasWarning(ctx context.Context, ns, name, reason string) error {
	list := &corev1.EventList{}
	if err := e.hub.List(ctx, list, client.InNamespace(ns)); err != nil {
		return err
	}
	for _, ev := range list.Items {
		if ev.InvolvedObject.Name == name && ev.Type == corev1.EventTypeWarning && ev.Reason == reason {
			return nil
		}
	}
	return fmt.Errorf("no Warning event %s about %s/%s", reason, ns, name)
}

// writeHugeStatus waits for the Application on the cluster — in a namespace its Argo CD does not watch, so
// that nothing else writes its status — and gives it a status whose resources section is over the agent's
// raw-JSON limit of 1 MiB, as a large Application's would be.
func writeHugeStatus(t *testing.T, e *env, name string) {
	t.Helper()
	ctx := context.Background()
	var resources []any
	for i := 0; len(resources)*120 < workclient.GRPCMaxJSONRawLength+100<<10; i++ {
		resources = append(resources, map[string]any{"version": "v1", "kind": "ConfigMap", "namespace": "catalogue",
			"name": fmt.Sprintf("config-%06d", i), "status": "Synced", "health": map[string]any{"status": "Healthy"}})
	}
	status := map[string]any{"sync": map[string]any{"status": "Synced"}, "health": map[string]any{"status": "Healthy"}, "resources": resources}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, time.Minute, "the Application on the cluster, with its huge status", func() error {
		app := argocd.NewApplication()
		app.SetNamespace(quietNS)
		app.SetName(name)
		return e.spoke.Patch(ctx, app, client.RawPatch(types.MergePatchType, patch))
	})
}
