package application_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"
	workv1 "open-cluster-management.io/api/work/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/argocd-pull/argocd-pull/internal/application"
	"github.com/argocd-pull/argocd-pull/internal/appstatus"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/hubmanager"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

// TestCreateUpdateNoOp: an Application becomes a work in its cluster's namespace; a spec change updates it; a
// reconcile that changes nothing writes nothing.
func TestCreateUpdateNoOp(t *testing.T) {
	c := hubClient(t)
	ns, cluster := setup(t, c)
	startController(t)

	createApp(t, c, newApp(ns, "guestbook", cluster))
	var w *workv1.ManifestWork
	testutil.Eventually(t, "work created", func() (err error) { w, err = getWork(c, cluster, ns, "guestbook"); return err })
	if w.Annotations[argocd.AnnotationHubAppNamespace] != ns || w.Annotations[argocd.AnnotationHubAppName] != "guestbook" {
		t.Errorf("work annotations = %v", w.Annotations)
	}
	if got := payloadApp(t, w); got.GetNamespace() != ns {
		t.Errorf("payload namespace = %s", got.GetNamespace())
	}
	testutil.Eventually(t, "finalizer added", func() error {
		if !controllerutil.ContainsFinalizer(getApp(t, c, ns, "guestbook"), application.Finalizer) {
			return errors.New("no finalizer")
		}
		return nil
	})

	updateApp(t, c, ns, "guestbook", func(app *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(app.Object, "v2", "spec", "source", "targetRevision")
	})
	testutil.Eventually(t, "work updated", func() error {
		w, err := getWork(c, cluster, ns, "guestbook")
		if err != nil {
			return err
		}
		if rev, _, _ := unstructured.NestedString(payloadApp(t, w).Object, "spec", "source", "targetRevision"); rev != "v2" {
			return fmt.Errorf("targetRevision = %q", rev)
		}
		return nil
	})

	// Label-only churn that does not change the work must not write it.
	w, _ = getWork(c, cluster, ns, "guestbook")
	rv := w.ResourceVersion
	updateApp(t, c, ns, "guestbook", func(app *unstructured.Unstructured) {
		a := app.GetAnnotations()
		a["unrelated"] = "x"
		app.SetAnnotations(a)
	})
	testutil.Eventually(t, "annotation delivered", func() error {
		w, err := getWork(c, cluster, ns, "guestbook")
		if err != nil {
			return err
		}
		if payloadApp(t, w).GetAnnotations()["unrelated"] != "x" {
			return errors.New("not yet")
		}
		rv = w.ResourceVersion
		return nil
	})
	testutil.Consistently(t, "work not rewritten", 2*time.Second, func() error {
		w, err := getWork(c, cluster, ns, "guestbook")
		if err != nil {
			return err
		}
		if w.ResourceVersion != rv {
			return fmt.Errorf("work written again: resourceVersion %s -> %s", rv, w.ResourceVersion)
		}
		return nil
	})
}

// TestRestartTrustsBuiltFrom: a restarted controller takes a work whose built-from digest matches its
// Application as current, without building it again, and builds what changed while it was down.
func TestRestartTrustsBuiltFrom(t *testing.T) {
	ctx := context.Background()
	c := hubClient(t)
	ns, cluster := setup(t, c)
	stop := startController(t)
	createApp(t, c, newApp(ns, "restart", cluster))
	var w *workv1.ManifestWork
	testutil.Eventually(t, "work created with what it was built from", func() (err error) {
		if w, err = getWork(c, cluster, ns, "restart"); err != nil {
			return err
		}
		if w.Annotations[application.AnnotationBuiltFrom] == "" {
			return errors.New("no built-from annotation")
		}
		return nil
	})
	stop()
	// A spec hash no build gives: a controller that built the work again would write it.
	builtFrom := w.Annotations[application.AnnotationBuiltFrom]
	patch := []byte(`{"metadata":{"annotations":{"` + application.AnnotationSpecHash + `":"not-built"}}}`)
	if err := c.Patch(ctx, w, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	startController(t)
	testutil.Consistently(t, "work not built again after a restart", 3*time.Second, func() error {
		got, err := getWork(c, cluster, ns, "restart")
		if err != nil {
			return err
		}
		if got.ResourceVersion != w.ResourceVersion {
			return fmt.Errorf("work written again: spec hash %s", got.Annotations[application.AnnotationSpecHash])
		}
		return nil
	})
	updateApp(t, c, ns, "restart", func(app *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(app.Object, "v2", "spec", "source", "targetRevision")
	})
	testutil.Eventually(t, "changed Application built and delivered", func() error {
		got, err := getWork(c, cluster, ns, "restart")
		if err != nil {
			return err
		}
		rev, _, _ := unstructured.NestedString(payloadApp(t, got).Object, "spec", "source", "targetRevision")
		if rev != "v2" || got.Annotations[application.AnnotationSpecHash] == "not-built" ||
			got.Annotations[application.AnnotationBuiltFrom] == builtFrom {
			return fmt.Errorf("targetRevision %q, spec hash %s, built from %s", rev,
				got.Annotations[application.AnnotationSpecHash], got.Annotations[application.AnnotationBuiltFrom])
		}
		return nil
	})
}

// setWorkStatus writes a work status as the work agent would: on the latest version, retrying on conflicts.
func setWorkStatus(t *testing.T, c client.Client, w *workv1.ManifestWork, values ...workv1.FeedbackValue) {
	t.Helper()
	testutil.Eventually(t, "write work status", func() error {
		latest := &workv1.ManifestWork{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(w), latest); err != nil {
			return err
		}
		now := metav1.Now()
		app := payloadApp(t, latest)
		latest.Status.Conditions = []metav1.Condition{{Type: workv1.WorkApplied, Status: metav1.ConditionTrue, Reason: "AppliedManifestWorkComplete", ObservedGeneration: latest.Generation, LastTransitionTime: now}}
		latest.Status.ResourceStatus.Manifests = []workv1.ManifestCondition{{
			ResourceMeta:    workv1.ManifestResourceMeta{Group: "argoproj.io", Version: "v1alpha1", Kind: "Application", Resource: "applications", Name: app.GetName(), Namespace: app.GetNamespace()},
			StatusFeedbacks: workv1.StatusFeedbackResult{Values: values},
			Conditions: []metav1.Condition{
				{Type: workv1.ManifestApplied, Status: metav1.ConditionTrue, Reason: "AppliedManifestComplete", ObservedGeneration: latest.Generation, LastTransitionTime: now},
				{Type: "StatusFeedbackSynced", Status: metav1.ConditionTrue, Reason: "StatusFeedbackSynced", LastTransitionTime: now},
			},
		}}
		return c.Status().Update(context.Background(), latest)
	})
}

func str(name, v string) workv1.FeedbackValue {
	return workv1.FeedbackValue{Name: name, Value: workv1.FieldValue{Type: workv1.String, String: &v}}
}

func raw(name, v string) workv1.FeedbackValue {
	return workv1.FeedbackValue{Name: name, Value: workv1.FieldValue{Type: workv1.JsonRaw, JsonRaw: &v}}
}

// TestStatusFromFeedback: the work's feedback becomes the hub Application's status, raw sections where they
// come back and the scalar fields otherwise; a status change is written, an identical one is not.
func TestStatusFromFeedback(t *testing.T) {
	c := hubClient(t)
	ns, cluster := setup(t, c)
	stop := startController(t)

	createApp(t, c, newApp(ns, "status", cluster))
	var w *workv1.ManifestWork
	testutil.Eventually(t, "work created", func() (err error) { w, err = getWork(c, cluster, ns, "status"); return err })

	setWorkStatus(t, c, w, str(appstatus.FeedbackSyncStatus, "OutOfSync"), str(appstatus.FeedbackHealthStatus, "Progressing"))
	testutil.Eventually(t, "small fields on the hub", func() error {
		app := getApp(t, c, ns, "status")
		s, _, _ := unstructured.NestedString(app.Object, "status", "sync", "status")
		h, _, _ := unstructured.NestedString(app.Object, "status", "health", "status")
		if s != "OutOfSync" || h != "Progressing" {
			return fmt.Errorf("sync=%q health=%q", s, h)
		}
		return nil
	})

	w, _ = getWork(c, cluster, ns, "status")
	setWorkStatus(t, c, w,
		str(appstatus.FeedbackSyncStatus, "Synced"), str(appstatus.FeedbackHealthStatus, "Healthy"),
		raw("status.sync", `{"status":"Synced","revision":"abc123","comparedTo":{"destination":{"server":"https://kubernetes.default.svc","namespace":"guestbook"},"source":{"repoURL":"http://git.example/repo.git"}}}`),
		// Characters encoding/json escapes: the stored status must still hash as the one the controller built.
		raw("status.health", `{"status":"Healthy","message":"<ok> & \u00e9t\u00e9 \u2028"}`),
		raw("status.resources", `[{"version":"v1","kind":"ConfigMap","namespace":"guestbook","name":"cm","status":"Synced","health":{"status":"Healthy"}}]`),
		raw("status.summary", `{"images":["nginx:1"]}`),
		str("status.sourceType", "Directory"),
	)
	testutil.Eventually(t, "raw status on the hub", func() error {
		app := getApp(t, c, ns, "status")
		rev, _, _ := unstructured.NestedString(app.Object, "status", "sync", "revision")
		res, _, _ := unstructured.NestedSlice(app.Object, "status", "resources")
		st, _, _ := unstructured.NestedString(app.Object, "status", "sourceType")
		if rev != "abc123" || len(res) != 1 || st != "Directory" {
			return fmt.Errorf("status = %v", app.Object["status"])
		}
		return nil
	})
	app := getApp(t, c, ns, "status")
	rv := app.GetResourceVersion()
	// The same feedback again (a status update of the work that changes nothing for the Application).
	w, _ = getWork(c, cluster, ns, "status")
	w.Status.Conditions[0].Message = "touched"
	if err := c.Status().Update(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	testutil.Consistently(t, "hub application not rewritten", 2*time.Second, func() error {
		if got := getApp(t, c, ns, "status").GetResourceVersion(); got != rv {
			return fmt.Errorf("application written again: %s -> %s", rv, got)
		}
		return nil
	})
	// A restarted controller recognises the stored status too.
	stop()
	startController(t)
	testutil.Consistently(t, "hub application not rewritten after a restart", 2*time.Second, func() error {
		if got := getApp(t, c, ns, "status").GetResourceVersion(); got != rv {
			return fmt.Errorf("application written again: %s -> %s", rv, got)
		}
		return nil
	})
	// The hub status was written twice; the work, whose Application did not change, never was.
	if w, err := getWork(c, cluster, ns, "status"); err != nil || w.Generation != 1 {
		t.Fatalf("work generation = %d (%v): status writes on the hub changed the work", w.Generation, err)
	}
}

// TestStatusAfterFeedbackFlap: the managed cluster's status reaches the hub even when it changes twice before
// the controller's cache has seen the controller's own status write, the second change back to the status the
// cache still shows. A restarted work agent does that to every work: it reports it first without feedback,
// then with the same feedback as before the restart. The controller's cache is made to lag its writes by a
// few seconds, so the window that a busy apiserver opens by chance is open every time.
func TestStatusAfterFeedbackFlap(t *testing.T) {
	c := hubClient(t)
	ns, cluster := setup(t, c)
	const lag = 3 * time.Second
	startControllerOn(t, lagWatches(env.Hub.Config(), "applications", lag))

	createApp(t, c, newApp(ns, "flap", cluster))
	var w *workv1.ManifestWork
	testutil.Eventually(t, "work created", func() (err error) { w, err = getWork(c, cluster, ns, "flap"); return err })
	feedback := []workv1.FeedbackValue{
		str(appstatus.FeedbackSyncStatus, "Synced"), str(appstatus.FeedbackHealthStatus, "Healthy"),
		raw("status.sync", `{"status":"Synced","revision":"abc123"}`),
		raw("status.health", `{"status":"Healthy"}`),
	}
	syncStatus := func() string {
		s, _, _ := unstructured.NestedString(getApp(t, c, ns, "flap").Object, "status", "sync", "status")
		return s
	}
	setWorkStatus(t, c, w, feedback...)
	testutil.Eventually(t, "the cluster's status on the hub", func() error {
		if s := syncStatus(); s != "Synced" {
			return fmt.Errorf("sync status %q", s)
		}
		return nil
	})
	// Let the controller's cache catch up with that status.
	time.Sleep(lag + time.Second)

	// The agent restarts: the work without feedback, then with the same feedback again.
	setWorkStatus(t, c, w)
	testutil.Eventually(t, "the status without feedback on the hub", func() error {
		if s := syncStatus(); s != "" {
			return fmt.Errorf("sync status %q", s)
		}
		return nil
	})
	setWorkStatus(t, c, w, feedback...)
	testutil.Eventually(t, "the cluster's status on the hub again", func() error {
		if s := syncStatus(); s != "Synced" {
			return fmt.Errorf("sync status %q", s)
		}
		return nil
	})
}

// TestRefreshAndOperation: a refresh annotation and a sync operation set on the hub reach the managed
// cluster's payload and are cleared on the hub once the managed cluster has taken them over.
func TestRefreshAndOperation(t *testing.T) {
	c := hubClient(t)
	ns, cluster := setup(t, c)
	startController(t)

	createApp(t, c, newApp(ns, "ops", cluster))
	var w *workv1.ManifestWork
	testutil.Eventually(t, "work created", func() (err error) { w, err = getWork(c, cluster, ns, "ops"); return err })
	setWorkStatus(t, c, w, str(appstatus.FeedbackSyncStatus, "Synced"),
		str(appstatus.FeedbackOperationPhase, "Succeeded"), str(appstatus.FeedbackOperationStartedAt, "2026-01-01T00:00:00Z"))

	// Refresh.
	updateApp(t, c, ns, "ops", func(app *unstructured.Unstructured) {
		a := app.GetAnnotations()
		a[argocd.AnnotationRefresh] = "hard"
		app.SetAnnotations(a)
	})
	testutil.Eventually(t, "refresh delivered", func() (err error) {
		if w, err = getWork(c, cluster, ns, "ops"); err != nil {
			return err
		}
		if payloadApp(t, w).GetAnnotations()[argocd.AnnotationRefresh] != "hard" {
			return errors.New("refresh not in the payload")
		}
		return nil
	})
	if _, ok := getApp(t, c, ns, "ops").GetAnnotations()[argocd.AnnotationRefresh]; !ok {
		t.Fatal("refresh cleared on the hub before the managed cluster applied it")
	}
	setWorkStatus(t, c, w, str(appstatus.FeedbackSyncStatus, "Synced"),
		str(appstatus.FeedbackOperationPhase, "Succeeded"), str(appstatus.FeedbackOperationStartedAt, "2026-01-01T00:00:00Z"))
	testutil.Eventually(t, "refresh cleared on the hub and in the payload", func() error {
		if _, ok := getApp(t, c, ns, "ops").GetAnnotations()[argocd.AnnotationRefresh]; ok {
			return errors.New("refresh still on the hub")
		}
		w, err := getWork(c, cluster, ns, "ops")
		if err != nil {
			return err
		}
		if _, ok := payloadApp(t, w).GetAnnotations()[argocd.AnnotationRefresh]; ok {
			return errors.New("refresh still in the payload")
		}
		return nil
	})

	// Sync operation.
	updateApp(t, c, ns, "ops", func(app *unstructured.Unstructured) {
		app.Object["operation"] = map[string]any{"initiatedBy": map[string]any{"username": "admin"}, "sync": map[string]any{"revision": "HEAD"}}
	})
	testutil.Eventually(t, "operation delivered", func() (err error) {
		if w, err = getWork(c, cluster, ns, "ops"); err != nil {
			return err
		}
		if payloadApp(t, w).Object["operation"] == nil {
			return errors.New("no operation in the payload")
		}
		if w.Annotations[application.AnnotationOperationBaseline] != "2026-01-01T00:00:00Z" {
			return fmt.Errorf("baseline = %q", w.Annotations[application.AnnotationOperationBaseline])
		}
		return nil
	})
	// The managed cluster reports a finished operation that is not the hub's (an earlier one, or an automated
	// sync in the same second): the hub keeps its .operation.
	setWorkStatus(t, c, w, str(appstatus.FeedbackSyncStatus, "Synced"),
		str(appstatus.FeedbackOperationPhase, "Succeeded"), str(appstatus.FeedbackOperationStartedAt, "2026-01-01T00:05:00Z"))
	testutil.Consistently(t, "operation kept while the cluster has not run it", time.Second, func() error {
		if getApp(t, c, ns, "ops").Object["operation"] == nil {
			return errors.New("operation cleared too early")
		}
		return nil
	})
	// Until the cluster begins the hub's operation, its operationState is an earlier operation's: the hub does
	// not show it (argocd-server reset it when it set the operation).
	if state, ok, _ := unstructured.NestedMap(getApp(t, c, ns, "ops").Object, "status", "operationState"); ok {
		t.Fatalf("hub shows the earlier operation's state %v while its own operation waits", state)
	}
	// The cluster ran the hub's operation (its marker is in the operation state), still running.
	w, _ = getWork(c, cluster, ns, "ops")
	marker := application.OperationMarker(getApp(t, c, ns, "ops").Object["operation"], w.Annotations[application.AnnotationOperationBaseline])
	if info, _, _ := unstructured.NestedSlice(payloadApp(t, w).Object, "operation", "info"); len(info) != 1 || info[0].(map[string]any)["value"] != marker {
		t.Fatalf("payload operation info = %v, want marker %s", info, marker)
	}
	setWorkStatus(t, c, w, str(appstatus.FeedbackSyncStatus, "Synced"), str(appstatus.FeedbackOperationMarker, marker),
		str(appstatus.FeedbackOperationPhase, "Running"), str(appstatus.FeedbackOperationStartedAt, "2026-01-01T00:05:00Z"))
	testutil.Eventually(t, "the running operation's state on the hub", func() error {
		if phase, _, _ := unstructured.NestedString(getApp(t, c, ns, "ops").Object, "status", "operationState", "phase"); phase != "Running" {
			return fmt.Errorf("operationState.phase = %q", phase)
		}
		return nil
	})
	testutil.Consistently(t, "operation kept while it runs", time.Second, func() error {
		if getApp(t, c, ns, "ops").Object["operation"] == nil {
			return errors.New("operation cleared while running")
		}
		return nil
	})
	// The cluster's clock is ahead of the hub's: reconciledAt still reaches the end of the operation, which
	// `argocd app sync` waits for.
	finished := time.Now().UTC().Add(time.Hour).Truncate(time.Second).Format(time.RFC3339)
	setWorkStatus(t, c, w, str(appstatus.FeedbackSyncStatus, "Synced"), str(appstatus.FeedbackOperationMarker, marker),
		str(appstatus.FeedbackOperationPhase, "Succeeded"), str(appstatus.FeedbackOperationStartedAt, "2026-01-01T00:05:00Z"),
		str(appstatus.FeedbackOperationFinishedAt, finished))
	testutil.Eventually(t, "operation handed off", func() error {
		app := getApp(t, c, ns, "ops")
		if app.Object["operation"] != nil {
			return errors.New("operation still on the hub")
		}
		if phase, _, _ := unstructured.NestedString(app.Object, "status", "operationState", "phase"); phase != "Succeeded" {
			return fmt.Errorf("operationState.phase = %q", phase)
		}
		if at, _, _ := unstructured.NestedString(app.Object, "status", "reconciledAt"); at != finished {
			return fmt.Errorf("reconciledAt = %q, want the operation's end %s", at, finished)
		}
		return nil
	})
}

// TestReconciledAfterOperation: `argocd app sync` returns once reconciledAt reaches the end of the operation. The
// managed cluster's Argo CD reports the end of a sync first with its comparison from before the sync (OutOfSync),
// then compares again: the hub's reconciledAt stays before the operation's end until that comparison is in the
// status (a later status), or until nothing new has come for a few seconds (the comparison found nothing new).
func TestReconciledAfterOperation(t *testing.T) {
	c := hubClient(t)
	ns, cluster := setup(t, c)
	startController(t)

	createApp(t, c, newApp(ns, "synced", cluster))
	var w *workv1.ManifestWork
	testutil.Eventually(t, "work created", func() (err error) { w, err = getWork(c, cluster, ns, "synced"); return err })
	reconciled := func() (at, finished time.Time) {
		app := getApp(t, c, ns, "synced")
		s, _, _ := unstructured.NestedString(app.Object, "status", "reconciledAt")
		f, _, _ := unstructured.NestedString(app.Object, "status", "operationState", "finishedAt")
		at, _ = time.Parse(time.RFC3339, s)
		finished, _ = time.Parse(time.RFC3339, f)
		return at, finished
	}
	ended := func(sync, finished string) {
		setWorkStatus(t, c, w, str(appstatus.FeedbackSyncStatus, sync), str(appstatus.FeedbackOperationPhase, "Succeeded"),
			str(appstatus.FeedbackOperationStartedAt, "2026-01-01T00:00:00Z"), str(appstatus.FeedbackOperationFinishedAt, finished))
	}
	awaited := func(what, finishedAt string) {
		testutil.Eventually(t, what, func() error {
			at, finished := reconciled()
			if finished.Format(time.RFC3339) != finishedAt || !at.Before(finished) {
				return fmt.Errorf("reconciledAt %s, operation finished %s", at, finished)
			}
			return nil
		})
	}
	compared := func(what string) {
		testutil.Eventually(t, what, func() error {
			if at, finished := reconciled(); finished.IsZero() || at.Before(finished) {
				return fmt.Errorf("reconciledAt %s, operation finished %s", at, finished)
			}
			return nil
		})
	}

	// The end of the sync with the comparison from before it; then the comparison after it.
	first := time.Now().UTC().Add(-time.Minute).Truncate(time.Second).Format(time.RFC3339)
	ended("OutOfSync", first)
	awaited("reconciledAt before the operation's end while the comparison after it is awaited", first)
	ended("Synced", first)
	compared("reconciledAt at or after the operation's end once the comparison after it came")

	// Another sync whose comparison afterwards finds what the one before found: no later status comes, and
	// reconciledAt reaches the operation's end after operationSettle.
	second := time.Now().UTC().Truncate(time.Second).Format(time.RFC3339)
	ended("OutOfSync", second)
	awaited("reconciledAt before the second operation's end", second)
	compared("reconciledAt at or after the second operation's end once nothing new came for a while")
}

// TestRefreshStormAndHydrate: argocd-server sets a refresh with the hydrate annotation on every page view that
// misses its cache. The refresh reaches the managed cluster, the hydrate annotation does not (the Application has
// no source hydrator), and both are cleared on the hub; a normal refresh moments later is cleared on the hub
// without another hand-off, a hard one is handed off.
func TestRefreshStormAndHydrate(t *testing.T) {
	c := hubClient(t)
	ns, cluster := setup(t, c)
	startController(t)

	createApp(t, c, newApp(ns, "storm", cluster))
	var w *workv1.ManifestWork
	testutil.Eventually(t, "work created", func() (err error) { w, err = getWork(c, cluster, ns, "storm"); return err })
	setWorkStatus(t, c, w, str(appstatus.FeedbackSyncStatus, "Synced"))

	refresh := func(kind string) {
		updateApp(t, c, ns, "storm", func(app *unstructured.Unstructured) {
			a := app.GetAnnotations()
			a[argocd.AnnotationRefresh] = kind
			a[argocd.AnnotationHydrate] = "normal"
			app.SetAnnotations(a)
		})
	}
	clearedOnHub := func(what string) {
		t.Helper()
		testutil.Eventually(t, what, func() error {
			a := getApp(t, c, ns, "storm").GetAnnotations()
			if _, ok := a[argocd.AnnotationRefresh]; ok {
				return errors.New("refresh still on the hub")
			}
			if _, ok := a[argocd.AnnotationHydrate]; ok {
				return errors.New("hydrate still on the hub")
			}
			return nil
		})
	}

	refresh("normal")
	testutil.Eventually(t, "refresh delivered", func() (err error) {
		if w, err = getWork(c, cluster, ns, "storm"); err != nil {
			return err
		}
		if payloadApp(t, w).GetAnnotations()[argocd.AnnotationRefresh] != "normal" {
			return errors.New("refresh not in the payload")
		}
		return nil
	})
	if _, ok := payloadApp(t, w).GetAnnotations()[argocd.AnnotationHydrate]; ok {
		t.Fatal("the hydrate annotation is delivered to an Application without a source hydrator")
	}
	setWorkStatus(t, c, w, str(appstatus.FeedbackSyncStatus, "Synced"))
	clearedOnHub("first refresh cleared on the hub")
	testutil.Eventually(t, "refresh gone from the payload", func() (err error) {
		if w, err = getWork(c, cluster, ns, "storm"); err != nil {
			return err
		}
		if _, ok := payloadApp(t, w).GetAnnotations()[argocd.AnnotationRefresh]; ok {
			return errors.New("refresh still in the payload")
		}
		return nil
	})
	generation := w.Generation

	refresh("normal")
	clearedOnHub("covered refresh cleared on the hub")
	if w, err := getWork(c, cluster, ns, "storm"); err != nil || w.Generation != generation {
		t.Fatalf("a refresh moments after the last one was handed off again (work generation %d, was %d, err %v)", w.Generation, generation, err)
	}

	refresh("hard")
	testutil.Eventually(t, "hard refresh delivered", func() (err error) {
		if w, err = getWork(c, cluster, ns, "storm"); err != nil {
			return err
		}
		if payloadApp(t, w).GetAnnotations()[argocd.AnnotationRefresh] != "hard" {
			return errors.New("hard refresh not in the payload")
		}
		return nil
	})
}

// TestDelete: deleting a standalone hub Application deletes its work, then the Application goes.
func TestDelete(t *testing.T) {
	c := hubClient(t)
	ns, cluster := setup(t, c)
	cfg, patches := recordPatches(env.Hub.Config())
	startControllerOn(t, cfg)

	createApp(t, c, newApp(ns, "gone", cluster))
	testutil.Eventually(t, "work created and finalizer set", func() error {
		if _, err := getWork(c, cluster, ns, "gone"); err != nil {
			return err
		}
		if !controllerutil.ContainsFinalizer(getApp(t, c, ns, "gone"), application.Finalizer) {
			return errors.New("no finalizer")
		}
		return nil
	})
	if err := c.Delete(context.Background(), getApp(t, c, ns, "gone")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "work and application deleted", func() error {
		if _, err := getWork(c, cluster, ns, "gone"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("work: %v", err)
		}
		app := argocd.NewApplication()
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "gone"}, app); !apierrors.IsNotFound(err) {
			return fmt.Errorf("application: %v", err)
		}
		return nil
	})
	// The write that takes the last finalizer off deletes the Application; it takes the status off too, so
	// that the apiserver does not validate and track the fields of a status it is about to delete.
	last := patches.lastTo("/namespaces/" + ns + "/applications/gone")
	if !strings.Contains(last, `"finalizers":[]`) || !strings.Contains(last, `"status":null`) {
		t.Errorf("the last PATCH of the deleted Application = %s, want its finalizers and its status off", last)
	}
}

// patchRecorder keeps the body of the last PATCH request a client sent to each path.
type patchRecorder struct {
	mu   sync.Mutex
	last map[string]string
}

// recordPatches returns a copy of cfg whose clients' PATCH bodies the returned recorder keeps.
func recordPatches(cfg *rest.Config) (*rest.Config, *patchRecorder) {
	r := &patchRecorder{last: map[string]string{}}
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodPatch && req.GetBody != nil {
				if body, err := req.GetBody(); err == nil {
					data, _ := io.ReadAll(body)
					r.mu.Lock()
					r.last[req.URL.Path] = string(data)
					r.mu.Unlock()
				}
			}
			return rt.RoundTrip(req)
		})
	})
	return cfg, r
}

// lastTo returns the last PATCH body sent to a path ending in suffix.
func (r *patchRecorder) lastTo(suffix string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for path, body := range r.last {
		if strings.HasSuffix(path, suffix) {
			return body
		}
	}
	return ""
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestAdoptsExistingWork: a work the earlier OCM pull controllers wrote for an Application is taken over under
// its own name, updated in place, not duplicated: open-cluster-management-io/argocd-pull-integration's (the pull
// label and the hub Application annotations), and stolostron's (Red Hat ACM) for an ApplicationSet's
// Application, which has the application-set label and a hash of the ApplicationSet instead of the pull label
// (the controller labels it at start). A work with the application-set label but no hub Application is left alone.
func TestAdoptsExistingWork(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels map[string]string
		appSet bool
	}{
		{name: "argocd-pull-integration", labels: map[string]string{argocd.LabelPull: "true"}},
		{name: "stolostron ApplicationSet", appSet: true, labels: map[string]string{argocd.LabelAppSet: "true",
			"apps.open-cluster-management.io/application-set-hash": "5d41402abc4b2a76b9719d911017c592"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := hubClient(t)
			ns, cluster := setup(t, c)
			ctx := context.Background()
			old := &workv1.ManifestWork{ObjectMeta: metav1.ObjectMeta{
				Namespace: cluster, Name: "legacy-3f2a1", Labels: tc.labels,
				Annotations: map[string]string{argocd.AnnotationHubAppNamespace: ns, argocd.AnnotationHubAppName: "legacy"},
			}}
			other := &workv1.ManifestWork{ObjectMeta: metav1.ObjectMeta{Namespace: cluster, Name: "not-an-application",
				Labels: map[string]string{argocd.LabelAppSet: "true"}}}
			for _, w := range []*workv1.ManifestWork{old, other} {
				w.Spec.Workload.Manifests = []workv1.Manifest{{RawExtension: runtimeConfigMap()}}
				if err := c.Create(ctx, w); err != nil {
					t.Fatal(err)
				}
			}
			startController(t)
			app := newApp(ns, "legacy", cluster)
			if tc.appSet {
				app.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "argoproj.io/v1alpha1", Kind: "ApplicationSet",
					Name: "set", UID: "3c1a0cfa-0000-0000-0000-000000000003"}})
			}
			createApp(t, c, app)
			testutil.Eventually(t, "existing work taken over", func() error {
				w := &workv1.ManifestWork{}
				if err := c.Get(ctx, client.ObjectKeyFromObject(old), w); err != nil {
					return err
				}
				if w.Labels[argocd.LabelPull] != "true" || w.Annotations[application.AnnotationSpecHash] == "" ||
					payloadApp(t, w).GetName() != "legacy" {
					return errors.New("not taken over yet")
				}
				return nil
			})
			works := &workv1.ManifestWorkList{}
			if err := c.List(ctx, works, client.InNamespace(cluster), client.MatchingLabels{argocd.LabelPull: "true"}); err != nil {
				t.Fatal(err)
			}
			if len(works.Items) != 1 {
				t.Fatalf("%d works for one Application", len(works.Items))
			}
			if err := c.Get(ctx, client.ObjectKeyFromObject(other), other); err != nil || other.Labels[argocd.LabelPull] != "" {
				t.Fatalf("the other work: labels %v, %v", other.Labels, err)
			}
		})
	}
}

// TestDeleteReleasesArgoCDFinalizers: an ApplicationSet-owned Application with Argo CD's resources finalizer
// (which the hub's Argo CD never processes for a skip-reconcile Application) is released once its work is gone.
func TestDeleteReleasesArgoCDFinalizers(t *testing.T) {
	c := hubClient(t)
	ns, cluster := setup(t, c)
	startController(t)

	app := newApp(ns, "cascade", cluster)
	app.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "argoproj.io/v1alpha1", Kind: "ApplicationSet", Name: "set", UID: "3c1a0cfa-0000-0000-0000-000000000002"}})
	app.SetFinalizers([]string{argocd.ResourcesFinalizer, "example.com/someone-else"})
	createApp(t, c, app)
	testutil.Eventually(t, "work created", func() error { _, err := getWork(c, cluster, ns, "cascade"); return err })
	updateApp(t, c, ns, "cascade", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "Synced", "status", "sync", "status")
	})
	if err := c.Delete(context.Background(), getApp(t, c, ns, "cascade")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "work deleted and Argo CD's finalizer released", func() error {
		if _, err := getWork(c, cluster, ns, "cascade"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("work: %v", err)
		}
		app := getApp(t, c, ns, "cascade")
		if f := app.GetFinalizers(); len(f) != 1 || f[0] != "example.com/someone-else" {
			return fmt.Errorf("finalizers = %v", f)
		}
		// Another finalizer keeps the Application: it keeps its status too.
		if _, ok := app.Object["status"]; !ok {
			return errors.New("the Application lost its status while another finalizer holds it")
		}
		return nil
	})
	updateApp(t, c, ns, "cascade", func(u *unstructured.Unstructured) { u.SetFinalizers(nil) })
}

// TestSweeper: works whose hub Application no longer exists are removed, also when the Application went while
// the controller was down; works argocd-pull does not own are never touched.
func TestSweeper(t *testing.T) {
	c := hubClient(t)
	ns, cluster := setup(t, c)
	ctx := context.Background()

	// An ApplicationSet-owned Application has no finalizer: delete it while no controller runs.
	stop := startStoppable(t)
	app := newApp(ns, "owned", cluster)
	app.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "argoproj.io/v1alpha1", Kind: "ApplicationSet", Name: "set", UID: "3c1a0cfa-0000-0000-0000-000000000001"}})
	createApp(t, c, app)
	testutil.Eventually(t, "work created", func() error { _, err := getWork(c, cluster, ns, "owned"); return err })
	if controllerutil.ContainsFinalizer(getApp(t, c, ns, "owned"), application.Finalizer) {
		t.Error("an ApplicationSet-owned Application must not get the finalizer")
	}
	stop()
	if err := c.Delete(ctx, getApp(t, c, ns, "owned")); err != nil {
		t.Fatal(err)
	}

	orphan := &workv1.ManifestWork{ObjectMeta: metav1.ObjectMeta{
		Namespace: cluster, Name: "orphan",
		Labels:      map[string]string{argocd.LabelPull: "true"},
		Annotations: map[string]string{argocd.AnnotationHubAppNamespace: ns, argocd.AnnotationHubAppName: "never-existed"},
	}}
	foreign := &workv1.ManifestWork{ObjectMeta: metav1.ObjectMeta{
		Namespace: cluster, Name: "foreign",
		Annotations: map[string]string{argocd.AnnotationHubAppNamespace: ns, argocd.AnnotationHubAppName: "never-existed"},
	}}
	for _, w := range []*workv1.ManifestWork{orphan, foreign} {
		w.Spec.Workload.Manifests = []workv1.Manifest{{RawExtension: runtimeConfigMap()}}
		if err := c.Create(ctx, w); err != nil {
			t.Fatal(err)
		}
	}

	startController(t)
	testutil.Eventually(t, "orphaned works swept", func() error {
		for _, name := range []string{application.WorkName(ns, "owned"), "orphan"} {
			w := &workv1.ManifestWork{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: cluster, Name: name}, w); !apierrors.IsNotFound(err) {
				return fmt.Errorf("work %s still there: %v", name, err)
			}
		}
		return nil
	})
	testutil.Consistently(t, "foreign work kept", time.Second, func() error {
		return c.Get(ctx, client.ObjectKey{Namespace: cluster, Name: "foreign"}, &workv1.ManifestWork{})
	})
}

// startStoppable runs the controllers until the returned function is called.
func startStoppable(t *testing.T) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	opts := hubmanager.NewOptions()
	opts.MetricsAddress, opts.HealthAddress = "0", "0"
	opts.StartedMoreThanOnce = true
	ctl, err := hubmanager.New(ctx, env.Hub.Config(), opts)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ctl.Start(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
	}
}

// TestTenancyGate: an Application may only target clusters a PlacementDecision in its namespace selects.
func TestTenancyGate(t *testing.T) {
	c := hubClient(t)
	ns, cluster := names(t)
	testutil.CreateNamespace(t, c, ns)
	testutil.CreateNamespace(t, c, cluster)
	startController(t)

	createApp(t, c, newApp(ns, "gated", cluster))
	expectCondition(t, c, ns, "gated", argocd.ConditionClusterNotPermitted, "no PlacementDecision in namespace "+ns+" selects cluster "+cluster)
	if _, err := getWork(c, cluster, ns, "gated"); !apierrors.IsNotFound(err) {
		t.Fatalf("work delivered to a cluster that is not placed: %v", err)
	}
	testutil.Eventually(t, "warning event", func() error {
		for _, r := range warningEvents(t, c, ns, "gated") {
			if r == argocd.ConditionClusterNotPermitted {
				return nil
			}
		}
		return errors.New("no ClusterNotPermittedError event")
	})

	placeClusters(t, c, ns, cluster)
	testutil.Eventually(t, "work delivered once placed", func() error { _, err := getWork(c, cluster, ns, "gated"); return err })
	testutil.Eventually(t, "condition cleared", func() error {
		if msg := condition(getApp(t, c, ns, "gated"), argocd.ConditionClusterNotPermitted); msg != "" {
			return fmt.Errorf("condition still set: %s", msg)
		}
		return nil
	})
}

// TestTenancyGateOff: with the gate off any cluster may be targeted.
func TestTenancyGateOff(t *testing.T) {
	c := hubClient(t)
	ns, cluster := names(t)
	testutil.CreateNamespace(t, c, ns)
	testutil.CreateNamespace(t, c, cluster)
	startController(t, func(o *hubmanager.Options) { o.Application.TenancyGate = false })
	createApp(t, c, newApp(ns, "ungated", cluster))
	testutil.Eventually(t, "work delivered", func() error { _, err := getWork(c, cluster, ns, "ungated"); return err })
}

// TestUnknownCluster: a cluster without a namespace on the hub is reported, and delivery follows once the
// namespace exists.
func TestUnknownCluster(t *testing.T) {
	c := hubClient(t)
	ns, cluster := names(t)
	testutil.CreateNamespace(t, c, ns)
	startController(t, func(o *hubmanager.Options) { o.Application.TenancyGate = false })

	createApp(t, c, newApp(ns, "app", cluster))
	expectCondition(t, c, ns, "app", argocd.ConditionUnknownCluster, fmt.Sprintf("cluster %q is not known", cluster))
	testutil.CreateNamespace(t, c, cluster)
	testutil.Eventually(t, "work delivered once the cluster exists", func() error { _, err := getWork(c, cluster, ns, "app"); return err })
	testutil.Eventually(t, "condition cleared", func() error {
		if msg := condition(getApp(t, c, ns, "app"), argocd.ConditionUnknownCluster); msg != "" {
			return errors.New(msg)
		}
		return nil
	})
}

// TestLocalCluster: the local cluster is skipped unless enabled.
func TestLocalCluster(t *testing.T) {
	c := hubClient(t)
	ns, cluster := setup(t, c)
	mc := &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: cluster, Labels: map[string]string{argocd.LabelLocalCluster: "true"}}}
	if err := c.Create(context.Background(), mc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), mc) })
	startController(t)
	createApp(t, c, newApp(ns, "local", cluster))
	expectCondition(t, c, ns, "local", argocd.ConditionDeliveryWarning, "is the hub itself")
	if _, err := getWork(c, cluster, ns, "local"); !apierrors.IsNotFound(err) {
		t.Fatalf("work delivered to the local cluster: %v", err)
	}

	mc.Labels = nil
	if err := c.Update(context.Background(), mc); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "delivered once no longer local", func() error { _, err := getWork(c, cluster, ns, "local"); return err })
}

// TestRelocateAndUnlabel: moving an Application to another cluster moves its work; removing the pull label
// removes its work and the finalizer.
func TestRelocateAndUnlabel(t *testing.T) {
	c := hubClient(t)
	ns, cluster := setup(t, c)
	_, other := names(t)
	testutil.CreateNamespace(t, c, other)
	placeClustersUpdate(t, c, ns, cluster, other)
	startController(t)

	createApp(t, c, newApp(ns, "mover", cluster))
	testutil.Eventually(t, "work in the first cluster", func() error { _, err := getWork(c, cluster, ns, "mover"); return err })
	updateApp(t, c, ns, "mover", func(app *unstructured.Unstructured) {
		a := app.GetAnnotations()
		a[argocd.AnnotationManagedCluster] = other
		app.SetAnnotations(a)
	})
	testutil.Eventually(t, "work moved", func() error {
		if _, err := getWork(c, other, ns, "mover"); err != nil {
			return err
		}
		if _, err := getWork(c, cluster, ns, "mover"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("old work still there: %v", err)
		}
		return nil
	})

	updateApp(t, c, ns, "mover", func(app *unstructured.Unstructured) { app.SetLabels(nil) })
	testutil.Eventually(t, "work and finalizer removed", func() error {
		if _, err := getWork(c, other, ns, "mover"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("work still there: %v", err)
		}
		if controllerutil.ContainsFinalizer(getApp(t, c, ns, "mover"), application.Finalizer) {
			return errors.New("finalizer still there")
		}
		return nil
	})
}

// placeClustersUpdate makes the namespace's PlacementDecision select exactly the given clusters.
func placeClustersUpdate(t *testing.T, c client.Client, ns string, clusters ...string) {
	t.Helper()
	ctx := context.Background()
	list := &clusterv1beta1.PlacementDecisionList{}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) == 0 {
		placeClusters(t, c, ns, clusters...)
		return
	}
	pd := &list.Items[0]
	pd.Status.Decisions = nil
	for _, cl := range clusters {
		pd.Status.Decisions = append(pd.Status.Decisions, clusterv1beta1.ClusterDecision{ClusterName: cl})
	}
	if err := c.Status().Update(ctx, pd); err != nil {
		t.Fatal(err)
	}
}

func runtimeConfigMap() runtime.RawExtension {
	cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "default"}}
	return runtime.RawExtension{Object: cm}
}
