package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/localfleet"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// guestbookAppSet is an ApplicationSet written for the OCM pull model, unchanged: the clusterDecisionResource
// generator reads the Placement's decisions, and the template carries the pull label and annotations.
func guestbookAppSet(repoURL string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	_ = u.UnmarshalJSON([]byte(fmt.Sprintf(`{
  "apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet",
  "metadata": {"name": "guestbook", "namespace": "argocd"},
  "spec": {
    "generators": [{"clusterDecisionResource": {
      "configMapRef": "ocm-placement-generator",
      "labelSelector": {"matchLabels": {"cluster.open-cluster-management.io/placement": %q}},
      "requeueAfterSeconds": 30}}],
    "template": {
      "metadata": {
        "name": "{{name}}-guestbook",
        "labels": {"apps.open-cluster-management.io/pull-to-ocm-managed-cluster": "true"},
        "annotations": {
          "argocd.argoproj.io/skip-reconcile": "true",
          "apps.open-cluster-management.io/ocm-managed-cluster": "{{name}}",
          "apps.open-cluster-management.io/ocm-managed-cluster-app-namespace": "argocd"},
        "finalizers": ["resources-finalizer.argocd.argoproj.io"]},
      "spec": {
        "project": "default",
        "source": {"repoURL": %q, "targetRevision": "main", "path": "guestbook"},
        "destination": {"server": "{{server}}", "namespace": "guestbook"},
        "syncPolicy": {"automated": {"prune": true}, "syncOptions": ["CreateNamespace=true"]}}}}}`, localfleet.PlacementName, repoURL)))
	return u
}

var clusters = []string{"cluster1", "cluster2"}

// TestApplicationSetLifecycle runs an ApplicationSet through the fleet as an operator would see it, with real
// Argo CD on each managed cluster, in the Maestro mode and in the basic mode.
func TestApplicationSetLifecycle(t *testing.T) {
	for _, transport := range []string{workclient.TransportGRPC, workclient.TransportKube} {
		t.Run(transport, func(t *testing.T) { testLifecycle(t, transport) })
	}
}

func testLifecycle(t *testing.T, transport string) {
	ctx := context.Background()
	f := startFleet(t, localfleet.Options{Clusters: clusters, Transport: transport, ArgoCD: true})
	hub := must[client.Client](t)(f.HubClient())
	spokes := map[string]client.Client{}
	for _, c := range clusters {
		spokes[c] = must[client.Client](t)(f.ClusterClient(c))
	}
	err := f.Git.Commit(ctx, "apps", "guestbook", map[string]string{
		"guestbook/configmap.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: guestbook\ndata:\n  color: blue\n",
	})
	if err != nil {
		t.Fatal(err)
	}

	// 1. A repoURL that does not exist: both Applications are Unknown with Argo CD's error, nothing deployed.
	if err := hub.Create(ctx, guestbookAppSet(f.Git.URL("does-not-exist"))); err != nil {
		t.Fatal(err)
	}
	for _, c := range clusters {
		testutil.EventuallyWithin(t, 3*time.Minute, c+": Unknown with Argo CD's error on the hub", func() error {
			app := argocd.NewApplication()
			if err := get(ctx, hub, app, localfleet.ArgoCDNamespace, c+"-guestbook"); err != nil {
				return err
			}
			msg := conditionMessage(app, "ComparisonError")
			if nested(app, "status", "sync", "status") != "Unknown" || !strings.Contains(msg, "repository not found") {
				return fmt.Errorf("sync=%q ComparisonError=%q", nested(app, "status", "sync", "status"), msg)
			}
			return nil
		})
		if err := get(ctx, spokes[c], &corev1.ConfigMap{}, "guestbook", "guestbook"); !apierrors.IsNotFound(err) {
			t.Fatalf("%s: ConfigMap deployed from a repository that does not exist: %v", c, err)
		}
	}

	// 2. The repoURL fixed on the hub: Synced and Healthy, the ConfigMap on both clusters.
	appset := guestbookAppSet(f.Git.URL("apps"))
	testutil.EventuallyWithin(t, 30*time.Second, "fix the repoURL", func() error {
		current := appset.DeepCopy()
		if err := get(ctx, hub, current, localfleet.ArgoCDNamespace, "guestbook"); err != nil {
			return err
		}
		current.Object["spec"] = appset.Object["spec"]
		return hub.Update(ctx, current)
	})
	for _, c := range clusters {
		testutil.EventuallyWithin(t, 3*time.Minute, c+": Synced and Healthy on the hub, ConfigMap on the cluster", func() error {
			app := argocd.NewApplication()
			if err := get(ctx, hub, app, localfleet.ArgoCDNamespace, c+"-guestbook"); err != nil {
				return err
			}
			if s, h := nested(app, "status", "sync", "status"), nested(app, "status", "health", "status"); s != "Synced" || h != "Healthy" {
				return fmt.Errorf("sync=%q health=%q conditions=%v", s, h, app.Object["status"])
			}
			return get(ctx, spokes[c], &corev1.ConfigMap{}, "guestbook", "guestbook")
		})
	}
	if transport == workclient.TransportGRPC {
		expectWholeStatus(t, hub, spokes["cluster1"], "cluster1-guestbook")
		expectNoManifestWorks(t, hub)
	}

	// 3. A sync started on the hub runs on the cluster, and the hub's .operation is cleared afterwards.
	testutil.EventuallyWithin(t, 30*time.Second, "start a sync on the hub", func() error {
		app := argocd.NewApplication()
		if err := get(ctx, hub, app, localfleet.ArgoCDNamespace, "cluster1-guestbook"); err != nil {
			return err
		}
		app.Object["operation"] = map[string]any{
			"initiatedBy": map[string]any{"username": "e2e-" + transport},
			"sync":        map[string]any{"revision": "main", "prune": true},
		}
		return hub.Update(ctx, app)
	})
	testutil.EventuallyWithin(t, 2*time.Minute, "the sync ran on cluster1 and the hub's operation was handed off", func() error {
		spokeApp := argocd.NewApplication()
		if err := get(ctx, spokes["cluster1"], spokeApp, localfleet.ArgoCDNamespace, "cluster1-guestbook"); err != nil {
			return err
		}
		if by := nested(spokeApp, "status", "operationState", "operation", "initiatedBy", "username"); by != "e2e-"+transport ||
			nested(spokeApp, "status", "operationState", "phase") != "Succeeded" {
			return fmt.Errorf("cluster1 operationState = %v", spokeApp.Object["status"].(map[string]any)["operationState"])
		}
		app := argocd.NewApplication()
		if err := get(ctx, hub, app, localfleet.ArgoCDNamespace, "cluster1-guestbook"); err != nil {
			return err
		}
		if app.Object["operation"] != nil {
			st, _ := app.Object["status"].(map[string]any)
			return fmt.Errorf("the hub Application still has its .operation; hub operationState %v, conditions %v",
				st["operationState"], st["conditions"])
		}
		if nested(app, "status", "operationState", "phase") != "Succeeded" {
			return fmt.Errorf("hub operationState = %v", app.Object["status"].(map[string]any)["operationState"])
		}
		return nil
	})

	// 4. The ApplicationSet deleted: Applications and ConfigMaps gone everywhere, no work left.
	if err := hub.Delete(ctx, guestbookAppSet("")); err != nil {
		t.Fatal(err)
	}
	for _, c := range clusters {
		testutil.EventuallyWithin(t, 3*time.Minute, c+": Application and ConfigMap gone", func() error {
			for _, check := range []struct {
				c   client.Client
				obj client.Object
				ns  string
				n   string
			}{
				{hub, argocd.NewApplication(), localfleet.ArgoCDNamespace, c + "-guestbook"},
				{spokes[c], argocd.NewApplication(), localfleet.ArgoCDNamespace, c + "-guestbook"},
				{spokes[c], &corev1.ConfigMap{}, "guestbook", "guestbook"},
			} {
				if err := get(ctx, check.c, check.obj, check.ns, check.n); !apierrors.IsNotFound(err) {
					return fmt.Errorf("%T %s/%s still there (%v)", check.obj, check.ns, check.n, err)
				}
			}
			return nil
		})
	}
	testutil.EventuallyWithin(t, time.Minute, "no work left", func() error {
		if transport == workclient.TransportGRPC {
			n, err := f.ServerClient().CountResourceBundles(ctx)
			if err != nil || n != 0 {
				return fmt.Errorf("%d works on the server (%v)", n, err)
			}
			return nil
		}
		works := &workv1.ManifestWorkList{}
		if err := hub.List(ctx, works); err != nil || len(works.Items) != 0 {
			return fmt.Errorf("%d ManifestWorks on the hub (%v)", len(works.Items), err)
		}
		return nil
	})
}

// expectWholeStatus: the hub Application carries the managed cluster's whole status, except reconciledAt and
// observedAt, which argocd-pull leaves out on purpose.
func expectWholeStatus(t *testing.T, hub, spoke client.Client, name string) {
	t.Helper()
	ctx := context.Background()
	testutil.EventuallyWithin(t, time.Minute, "whole status on the hub", func() error {
		h, s := argocd.NewApplication(), argocd.NewApplication()
		if err := get(ctx, hub, h, localfleet.ArgoCDNamespace, name); err != nil {
			return err
		}
		if err := get(ctx, spoke, s, localfleet.ArgoCDNamespace, name); err != nil {
			return err
		}
		hs, _ := h.Object["status"].(map[string]any)
		ss, _ := s.Object["status"].(map[string]any)
		for _, k := range []string{"resources", "operationState", "summary", "sync", "health"} {
			if _, ok := hs[k]; !ok {
				return fmt.Errorf("hub status has no %s: %v", k, hs)
			}
		}
		// reconciledAt is each side's own reconcile time (the hub's is its write time); observedAt is the cluster's.
		delete(hs, "reconciledAt")
		delete(ss, "reconciledAt")
		delete(ss, "observedAt")
		if !reflect.DeepEqual(hs, ss) {
			hj, _ := json.Marshal(hs)
			sj, _ := json.Marshal(ss)
			return fmt.Errorf("hub status differs from the cluster's:\nhub     %s\ncluster %s", hj, sj)
		}
		return nil
	})
}

// expectNoManifestWorks: the Maestro mode writes no ManifestWork to the hub.
func expectNoManifestWorks(t *testing.T, hub client.Client) {
	t.Helper()
	works := &workv1.ManifestWorkList{}
	if err := hub.List(context.Background(), works); err != nil {
		t.Fatal(err)
	}
	if len(works.Items) != 0 {
		t.Fatalf("%d ManifestWorks on the hub in the Maestro mode", len(works.Items))
	}
}
