package appsetreport_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
	"github.com/argocd-pull/argocd-pull/internal/application"
	"github.com/argocd-pull/argocd-pull/internal/appsetreport"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/hubmanager"
	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

var env *loopback.Env

func TestMain(m *testing.M) {
	os.Exit(testutil.Main(m, loopback.Options{ControllerLog: true}, &env))
}

// hubClient is a direct (uncached) client of the hub.
func hubClient(t *testing.T) client.WithWatch {
	t.Helper()
	return testutil.Client(t, env.Hub.Config(), hubmanager.Scheme())
}

// startReporter runs only the report controller, with the manager's cache set up as `argocd-pull controller`
// sets it up, until the test ends (or stop is called). Without the application controller, the tests write
// the hub Applications' status themselves, as it would.
func startReporter(t *testing.T, opts appsetreport.Options) (stop func()) {
	t.Helper()
	return startReporterOn(t, env.Hub.Config(), opts)
}

// startReporterOn is startReporter with the manager's rest config.
func startReporterOn(t *testing.T, cfg *rest.Config, opts appsetreport.Options) (stop func()) {
	t.Helper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: hubmanager.Scheme(),
		Cache: cache.Options{
			ByObject:         map[client.Object]cache.ByObject{argocd.NewApplication(): application.CacheOptions()},
			DefaultTransform: cache.TransformStripManagedFields(),
		},
		Client:                 client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := (&appsetreport.Reconciler{Options: opts}).SetupWithManager(ctx, mgr); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var stopped atomic.Bool
	stop = func() {
		if stopped.Swap(true) {
			return
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

func options(interval time.Duration) appsetreport.Options {
	o := appsetreport.DefaultOptions()
	o.Interval = interval
	return o
}

var seq atomic.Int32

// namespace creates a fresh namespace for a test.
func namespace(t *testing.T, c client.Client) string {
	t.Helper()
	name := fmt.Sprintf("report-%d", seq.Add(1))
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// createApp creates a pull-model hub Application for cluster, owned by appSet, as the ApplicationSet
// controller would generate it, with the given status (nil for none yet).
func createApp(t *testing.T, c client.Client, appSet *unstructured.Unstructured, name, cluster string, status map[string]any) {
	t.Helper()
	app := argocd.NewApplication()
	app.SetNamespace(appSet.GetNamespace())
	app.SetName(name)
	app.SetLabels(map[string]string{argocd.LabelPull: "true"})
	app.SetAnnotations(map[string]string{argocd.AnnotationManagedCluster: cluster, argocd.AnnotationSkipReconcile: "true"})
	app.SetOwnerReferences([]metav1.OwnerReference{{
		APIVersion: "argoproj.io/v1alpha1", Kind: "ApplicationSet", Name: appSet.GetName(), UID: appSet.GetUID(),
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}})
	app.Object["spec"] = map[string]any{
		"project":     "default",
		"source":      map[string]any{"repoURL": "http://git.example/repo.git", "path": "guestbook", "targetRevision": "HEAD"},
		"destination": map[string]any{"server": argocd.InClusterServer, "namespace": "guestbook"},
	}
	if err := c.Create(context.Background(), app); err != nil {
		t.Fatal(err)
	}
	if status != nil {
		setStatus(t, c, app.GetNamespace(), name, status)
	}
}

// setStatus replaces a hub Application's status the way the application controller writes it: a JSON patch of
// the main resource (the Application CRD has no status subresource).
func setStatus(t *testing.T, c client.Client, ns, name string, status map[string]any) {
	t.Helper()
	if err := patchStatus(c, ns, name, status); err != nil {
		t.Fatal(err)
	}
}

func patchStatus(c client.Client, ns, name string, status map[string]any) error {
	data, err := json.Marshal([]map[string]any{{"op": "add", "path": "/status", "value": status}})
	if err != nil {
		return err
	}
	app := argocd.NewApplication()
	app.SetNamespace(ns)
	app.SetName(name)
	return c.Patch(context.Background(), app, client.RawPatch(types.JSONPatchType, data))
}

func deleteObject(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Delete(context.Background(), obj); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

func appStatus(sync, health string, extra ...func(map[string]any)) map[string]any {
	s := map[string]any{
		"sync":   map[string]any{"status": sync, "revision": "0123abc"},
		"health": map[string]any{"status": health},
		"resources": []any{
			map[string]any{"version": "v1", "kind": "ConfigMap", "namespace": "guestbook", "name": "guestbook-config", "status": sync},
			map[string]any{"group": "apps", "version": "v1", "kind": "Deployment", "namespace": "guestbook", "name": "guestbook-ui", "status": sync,
				"health": map[string]any{"status": health}},
		},
	}
	for _, e := range extra {
		e(s)
	}
	return s
}

func withCondition(typ, message string) func(map[string]any) {
	return func(s map[string]any) {
		s["conditions"] = []any{map[string]any{"type": typ, "message": message, "lastTransitionTime": "2025-01-01T00:00:00Z"}}
	}
}

func getReport(c client.Client, ns, name string) (*v1alpha1.MulticlusterApplicationSetReport, error) {
	r := &v1alpha1.MulticlusterApplicationSetReport{}
	err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, r)
	return r, err
}

// waitReport waits until the report exists and check accepts it, and returns it.
func waitReport(t *testing.T, c client.Client, ns, name string, check func(*v1alpha1.MulticlusterApplicationSetReport) error) *v1alpha1.MulticlusterApplicationSetReport {
	t.Helper()
	var r *v1alpha1.MulticlusterApplicationSetReport
	testutil.Eventually(t, fmt.Sprintf("report %s/%s", ns, name), func() error {
		var err error
		if r, err = getReport(c, ns, name); err != nil {
			return err
		}
		return check(r)
	})
	return r
}

// waitNoReport waits until the report is gone.
func waitNoReport(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("report %s/%s gone", ns, name), func() error {
		_, err := getReport(c, ns, name)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("report %s/%s still exists", ns, name)
	})
}

// summary is a report's summary as "clusters/synced/notSynced/healthy/notHealthy/inProgress".
func summary(r *v1alpha1.MulticlusterApplicationSetReport) string {
	s := r.Statuses.Summary
	return fmt.Sprintf("%s/%s/%s/%s/%s/%s", s.Clusters, s.Synced, s.NotSynced, s.Healthy, s.NotHealthy, s.InProgress)
}

func expectSummary(want string) func(*v1alpha1.MulticlusterApplicationSetReport) error {
	return func(r *v1alpha1.MulticlusterApplicationSetReport) error {
		if got := summary(r); got != want {
			return fmt.Errorf("summary clusters/synced/notSynced/healthy/notHealthy/inProgress = %s, want %s", got, want)
		}
		return nil
	}
}

func entryFor(r *v1alpha1.MulticlusterApplicationSetReport, cluster string) *v1alpha1.ClusterCondition {
	for i := range r.Statuses.ClusterConditions {
		if r.Statuses.ClusterConditions[i].Cluster == cluster {
			return &r.Statuses.ClusterConditions[i]
		}
	}
	return nil
}
