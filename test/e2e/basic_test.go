package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/localfleet"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// TestBasicModel: the basic OCM pull model with ManifestWork objects on the hub. A hub Application becomes an
// Application on the managed cluster through the real OCM work agent; the status Argo CD would write there
// shows on the hub; deleting the hub Application removes the managed cluster's Application.
func TestBasicModel(t *testing.T) {
	ctx := context.Background()
	f := startFleet(t, localfleet.Options{Clusters: []string{"cluster1"}, Transport: workclient.TransportKube})
	hub := must[client.Client](t)(f.HubClient())
	spoke := must[client.Client](t)(f.ClusterClient("cluster1"))
	const ns = localfleet.ArgoCDNamespace
	if err := spoke.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "argocd"}}); err != nil {
		t.Fatal(err)
	}

	app := argocd.NewApplication()
	app.SetNamespace(ns)
	app.SetName("guestbook")
	app.SetLabels(map[string]string{argocd.LabelPull: "true"})
	app.SetAnnotations(map[string]string{
		argocd.AnnotationManagedCluster: "cluster1",
		argocd.AnnotationAppNamespace:   "argocd",
		argocd.AnnotationSkipReconcile:  "true",
	})
	app.Object["spec"] = map[string]any{
		"project":     "default",
		"source":      map[string]any{"repoURL": "http://git.example/repo.git", "path": "guestbook", "targetRevision": "HEAD"},
		"destination": map[string]any{"name": "cluster1", "namespace": "guestbook"},
	}
	if err := hub.Create(ctx, app); err != nil {
		t.Fatal(err)
	}

	spokeApp := argocd.NewApplication()
	testutil.EventuallyWithin(t, time.Minute, "application on the managed cluster", func() error {
		return spoke.Get(ctx, client.ObjectKey{Namespace: "argocd", Name: "guestbook"}, spokeApp)
	})
	if got := nested(spokeApp, "spec", "destination", "server"); got != argocd.InClusterServer {
		t.Errorf("spoke destination server = %q", got)
	}
	if _, ok := spokeApp.GetAnnotations()[argocd.AnnotationSkipReconcile]; ok {
		t.Error("skip-reconcile reached the managed cluster")
	}

	// Argo CD on the managed cluster would write this status.
	writeSpokeStatus(t, spoke, "guestbook", map[string]any{
		"sync":      map[string]any{"status": "Synced", "revision": "0123abc"},
		"health":    map[string]any{"status": "Healthy"},
		"resources": []any{map[string]any{"version": "v1", "kind": "ConfigMap", "namespace": "guestbook", "name": "guestbook-config", "status": "Synced"}},
	})
	testutil.EventuallyWithin(t, time.Minute, "managed cluster's status on the hub", func() error {
		got := argocd.NewApplication()
		if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: "guestbook"}, got); err != nil {
			return err
		}
		res, _, _ := unstructured.NestedSlice(got.Object, "status", "resources")
		if nested(got, "status", "sync", "status") != "Synced" || nested(got, "status", "health", "status") != "Healthy" ||
			nested(got, "status", "sync", "revision") != "0123abc" || len(res) != 1 {
			return fmt.Errorf("hub status = %v", got.Object["status"])
		}
		return nil
	})

	// A status section over the hub CRD's 1024-character limit stays on the managed cluster; the hub shows the
	// scalar fields and says what is missing.
	var many []any
	for i := range 30 {
		many = append(many, map[string]any{"version": "v1", "kind": "ConfigMap", "namespace": "guestbook", "name": fmt.Sprintf("config-%02d", i), "status": "OutOfSync"})
	}
	writeSpokeStatus(t, spoke, "guestbook", map[string]any{
		"sync":      map[string]any{"status": "OutOfSync", "revision": "4567def"},
		"health":    map[string]any{"status": "Healthy"},
		"resources": many,
	})
	testutil.EventuallyWithin(t, time.Minute, "large status reported", func() error {
		got := argocd.NewApplication()
		if err := hub.Get(ctx, client.ObjectKey{Namespace: ns, Name: "guestbook"}, got); err != nil {
			return err
		}
		if nested(got, "status", "sync", "status") != "OutOfSync" {
			return fmt.Errorf("sync = %q", nested(got, "status", "sync", "status"))
		}
		if !strings.Contains(conditionMessage(got, argocd.ConditionDeliveryWarning), "status.resources") {
			return fmt.Errorf("no DeliveryWarning about status.resources: %v", got.Object["status"])
		}
		return nil
	})

	if err := hub.Delete(ctx, app); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, time.Minute, "application removed from the managed cluster, then from the hub", func() error {
		for _, check := range []struct {
			c   client.Client
			key client.ObjectKey
		}{{spoke, client.ObjectKey{Namespace: "argocd", Name: "guestbook"}}, {hub, client.ObjectKey{Namespace: ns, Name: "guestbook"}}} {
			err := check.c.Get(ctx, check.key, argocd.NewApplication())
			if err == nil {
				return fmt.Errorf("%s still there", check.key)
			}
			if !apierrors.IsNotFound(err) {
				return err
			}
		}
		return nil
	})
}

// writeSpokeStatus sets the status of an Application on a managed cluster, as its Argo CD would.
func writeSpokeStatus(t *testing.T, c client.Client, name string, status map[string]any) {
	t.Helper()
	testutil.EventuallyWithin(t, 30*time.Second, "write managed cluster status", func() error {
		app := argocd.NewApplication()
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "argocd", Name: name}, app); err != nil {
			return err
		}
		app.Object["status"] = status
		return c.Update(context.Background(), app)
	})
}
