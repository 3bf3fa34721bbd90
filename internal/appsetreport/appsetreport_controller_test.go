package appsetreport_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/argocd-pull/argocd-pull/api/v1alpha1"
	"github.com/argocd-pull/argocd-pull/internal/application"
	"github.com/argocd-pull/argocd-pull/internal/appsetreport"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/hubmanager"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

func TestReportAfterCreate(t *testing.T) {
	c := hubClient(t)
	startReporter(t, options(500*time.Millisecond))
	ns := namespace(t, c)
	appSet := testutil.CreateAppSet(t, c, ns, "guestbook")
	createApp(t, c, appSet, "guestbook-c1", "c1", appStatus("Synced", "Healthy"))
	createApp(t, c, appSet, "guestbook-c2", "c2", appStatus("OutOfSync", "Degraded",
		withCondition("SyncError", "Deployment.apps \"guestbook-ui\" is invalid")))
	createApp(t, c, appSet, "guestbook-c3", "c3", nil) // not delivered yet

	r := waitReport(t, c, ns, "guestbook", expectSummary("3/1/2/1/2/0"))

	if got := r.Labels[v1alpha1.LabelHostingAppSet]; got != ns+".guestbook" {
		t.Errorf("label %s = %q, want %q", v1alpha1.LabelHostingAppSet, got, ns+".guestbook")
	}
	if refs := r.OwnerReferences; len(refs) != 1 || refs[0].UID != appSet.GetUID() || refs[0].Kind != "ApplicationSet" {
		t.Errorf("owner references = %+v, want the ApplicationSet %s", refs, appSet.GetUID())
	}
	updated := false
	for _, m := range r.ManagedFields {
		updated = updated || (m.Manager == appsetreport.FieldOwner && m.Operation == metav1.ManagedFieldsOperationUpdate)
	}
	if !updated {
		t.Errorf("report not written by an update as %s: %+v", appsetreport.FieldOwner, r.ManagedFields)
	}
	if n := len(r.Statuses.ClusterConditions); n != 3 {
		t.Fatalf("%d entries, want one per Application of a small ApplicationSet: %+v", n, r.Statuses.ClusterConditions)
	}
	c2 := entryFor(r, "c2")
	want := v1alpha1.ClusterCondition{
		Cluster: "c2", SyncStatus: "OutOfSync", HealthStatus: "Degraded", SyncRevision: "0123abc",
		App:            ns + "/guestbook-c2/c2/" + application.WorkName(ns, "guestbook-c2"),
		HubApplication: "guestbook-c2",
		Conditions:     []v1alpha1.AppCondition{{Type: "SyncError", Message: "Deployment.apps \"guestbook-ui\" is invalid"}},
	}
	if fmt.Sprint(*c2) != fmt.Sprint(want) {
		t.Errorf("entry c2 =\n%+v\nwant\n%+v", *c2, want)
	}
	if c3 := entryFor(r, "c3"); c3.SyncStatus != "Unknown" || c3.HealthStatus != "Unknown" {
		t.Errorf("entry c3 = %+v, want Unknown sync and health before the first status", *c3)
	}
	wantResources := []v1alpha1.ResourceRef{
		{APIVersion: "v1", Kind: "ConfigMap", Name: "guestbook-config", Namespace: "guestbook"},
		{APIVersion: "apps/v1", Kind: "Deployment", Name: "guestbook-ui", Namespace: "guestbook"},
	}
	if fmt.Sprint(r.Statuses.Resources) != fmt.Sprint(wantResources) {
		t.Errorf("resources = %+v, want %+v", r.Statuses.Resources, wantResources)
	}
	// An ApplicationSet without pull-model Applications has no report.
	testutil.CreateAppSet(t, c, ns, "push-only")
	testutil.Consistently(t, "no report for an ApplicationSet without pull-model Applications", 1500*time.Millisecond, func() error {
		if _, err := getReport(c, ns, "push-only"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("get report: %v", err)
		}
		return nil
	})
}

// syncOperation is the operation of an Application's operationState.
var syncOperation = map[string]any{"sync": map[string]any{"revision": "0123abc"}}

// twoSyncedApps starts the report controller and makes an ApplicationSet "guestbook" with two Synced/Healthy
// Applications, on clusters c1 and c2, in a namespace of its own; it returns the namespace and the first report
// that shows both.
func twoSyncedApps(t *testing.T, c client.Client) (string, *v1alpha1.MulticlusterApplicationSetReport) {
	t.Helper()
	startReporter(t, options(500*time.Millisecond))
	ns := namespace(t, c)
	appSet := testutil.CreateAppSet(t, c, ns, "guestbook")
	createApp(t, c, appSet, "guestbook-c1", "c1", appStatus("Synced", "Healthy"))
	createApp(t, c, appSet, "guestbook-c2", "c2", appStatus("Synced", "Healthy"))
	return ns, waitReport(t, c, ns, "guestbook", expectSummary("2/2/0/2/0/0"))
}

func TestReportFollowsStatusChanges(t *testing.T) {
	c := hubClient(t)
	ns, _ := twoSyncedApps(t, c)

	setStatus(t, c, ns, "guestbook-c2", appStatus("OutOfSync", "Progressing", func(s map[string]any) {
		s["operationState"] = map[string]any{"operation": syncOperation, "phase": "Running", "startedAt": "2025-06-01T10:00:00Z"}
		s["health"].(map[string]any)["message"] = "Waiting for rollout to finish"
	}))
	r := waitReport(t, c, ns, "guestbook", expectSummary("2/1/1/1/1/1"))
	if e := entryFor(r, "c2"); e.OperationStatePhase != "Running" || e.OperationStateStartedAt != "2025-06-01T10:00:00Z" ||
		e.Message != "Waiting for rollout to finish" {
		t.Errorf("entry c2 = %+v, want the running operation and the health message", *e)
	}

	setStatus(t, c, ns, "guestbook-c2", appStatus("OutOfSync", "Degraded", func(s map[string]any) {
		s["operationState"] = map[string]any{"operation": syncOperation, "phase": "Failed", "startedAt": "2025-06-01T10:00:00Z",
			"message": "one or more objects failed to apply"}
	}))
	waitReport(t, c, ns, "guestbook", func(r *v1alpha1.MulticlusterApplicationSetReport) error {
		if e := entryFor(r, "c2"); e == nil || e.OperationStatePhase != "Failed" || e.Message != "one or more objects failed to apply" {
			return fmt.Errorf("entry c2 = %+v, want the failed operation", e)
		}
		return expectSummary("2/1/1/1/1/0")(r)
	})

	setStatus(t, c, ns, "guestbook-c2", appStatus("Synced", "Healthy"))
	waitReport(t, c, ns, "guestbook", expectSummary("2/2/0/2/0/0"))
}

// TestReportKeepsWhatOthersSet: the controller updates a report from its cached copy. What others set on the
// report (a label, an annotation) stays through its writes; an edit of the statuses is undone.
func TestReportKeepsWhatOthersSet(t *testing.T) {
	c := hubClient(t)
	ns, r := twoSyncedApps(t, c)

	edit := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"web"},"annotations":{"note":"kept"}},`+
		`"statuses":{"summary":{"synced":"0"}}}`))
	if err := c.Patch(context.Background(), r, edit); err != nil {
		t.Fatal(err)
	}
	waitReport(t, c, ns, "guestbook", expectSummary("2/2/0/2/0/0"))
	setStatus(t, c, ns, "guestbook-c2", appStatus("OutOfSync", "Degraded"))
	r = waitReport(t, c, ns, "guestbook", expectSummary("2/1/1/1/1/0"))
	if r.Labels["team"] != "web" || r.Annotations["note"] != "kept" || r.Labels[v1alpha1.LabelHostingAppSet] != ns+".guestbook" {
		t.Errorf("labels %v, annotations %v: want the controller's label and what others set", r.Labels, r.Annotations)
	}
}

func TestReportClusterRemoved(t *testing.T) {
	c := hubClient(t)
	startReporter(t, options(500*time.Millisecond))
	ns := namespace(t, c)
	appSet := testutil.CreateAppSet(t, c, ns, "guestbook")
	createApp(t, c, appSet, "guestbook-c1", "c1", appStatus("Synced", "Healthy"))
	createApp(t, c, appSet, "guestbook-c2", "c2", appStatus("OutOfSync", "Degraded"))
	waitReport(t, c, ns, "guestbook", expectSummary("2/1/1/1/1/0"))

	// The cluster leaves the placement: the ApplicationSet controller deletes its Application.
	app := argocd.NewApplication()
	app.SetNamespace(ns)
	app.SetName("guestbook-c2")
	deleteObject(t, c, app)
	r := waitReport(t, c, ns, "guestbook", expectSummary("1/1/0/1/0/0"))
	if e := entryFor(r, "c2"); e != nil {
		t.Errorf("the removed cluster still has an entry: %+v", *e)
	}

	// The last Application goes: no report.
	app.SetName("guestbook-c1")
	deleteObject(t, c, app)
	waitNoReport(t, c, ns, "guestbook")
}

func TestReportRemovedWithApplicationSet(t *testing.T) {
	c := hubClient(t)
	startReporter(t, options(500*time.Millisecond))
	ns := namespace(t, c)
	appSet := testutil.CreateAppSet(t, c, ns, "guestbook")
	createApp(t, c, appSet, "guestbook-c1", "c1", appStatus("Synced", "Healthy"))
	waitReport(t, c, ns, "guestbook", expectSummary("1/1/0/1/0/0"))

	// No garbage collector runs here: the Application outlives its ApplicationSet (as with an orphaning
	// delete), and the controller itself must remove the report, and not bring it back on the Application's
	// next change.
	deleteObject(t, c, appSet)
	waitNoReport(t, c, ns, "guestbook")
	setStatus(t, c, ns, "guestbook-c1", appStatus("OutOfSync", "Healthy"))
	testutil.Consistently(t, "no report without the ApplicationSet", 2*time.Second, func() error {
		if _, err := getReport(c, ns, "guestbook"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("get report: %v", err)
		}
		return nil
	})
}

func TestReportCompactsLargeApplicationSets(t *testing.T) {
	c := hubClient(t)
	opts := options(500 * time.Millisecond)
	opts.Limits.MaxClusterConditions = 3
	startReporter(t, opts)
	ns := namespace(t, c)
	appSet := testutil.CreateAppSet(t, c, ns, "guestbook")
	for i := range 8 {
		s := appStatus("Synced", "Healthy")
		switch i {
		case 1:
			s = appStatus("OutOfSync", "Healthy")
		case 4:
			s = appStatus("Synced", "Degraded")
		case 6, 7:
			s = appStatus("Synced", "Progressing")
		}
		createApp(t, c, appSet, fmt.Sprintf("guestbook-c%d", i), fmt.Sprintf("c%d", i), s)
	}
	r := waitReport(t, c, ns, "guestbook", expectSummary("8/7/1/5/3/2"))
	var clusters []string
	for _, e := range r.Statuses.ClusterConditions {
		clusters = append(clusters, e.Cluster)
	}
	// Over the limit, Synced+Healthy clusters are only counted; the most severe three of the four others are
	// listed (Degraded, OutOfSync, then the first Progressing by name) and the fourth is counted as omitted.
	if got := strings.Join(clusters, ","); got != "c1,c4,c6" || r.Statuses.OmittedClusterConditions != 1 {
		t.Errorf("entries for %s (omitted %d), want c1,c4,c6 (omitted 1)", got, r.Statuses.OmittedClusterConditions)
	}
}

// TestReportCoalescesChurn changes the status of an ApplicationSet's Applications as fast as the API server
// takes it for a few seconds and counts the report's writes as the controller sends them: at most one per
// interval, and the report ends in step.
func TestReportCoalescesChurn(t *testing.T) {
	const (
		interval = time.Second
		apps     = 20
		churn    = 6 * time.Second
	)
	c := hubClient(t)
	// The writes are timed when the controller sends them, not when a watch delivers them (which a loaded
	// machine can bunch up).
	var (
		mu     sync.Mutex
		writes []time.Time
		ns     string
	)
	cfg := rest.CopyConfig(env.Hub.Config())
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			if r.Method != http.MethodGet && ns != "" && strings.Contains(r.URL.Path, "/namespaces/"+ns+"/multiclusterapplicationsetreports") {
				writes = append(writes, time.Now())
			}
			mu.Unlock()
			return next.RoundTrip(r)
		})
	})
	startReporterOn(t, cfg, options(interval))
	testNS := namespace(t, c)
	appSet := testutil.CreateAppSet(t, c, testNS, "guestbook")
	for i := range apps {
		createApp(t, c, appSet, fmt.Sprintf("guestbook-c%02d", i), fmt.Sprintf("c%02d", i), appStatus("Synced", "Healthy"))
	}
	waitReport(t, c, testNS, "guestbook", expectSummary(fmt.Sprintf("%d/%d/0/%d/0/0", apps, apps, apps)))
	mu.Lock()
	ns = testNS
	mu.Unlock()

	// Four writers flip Applications between Healthy and Degraded with a changing message.
	start := time.Now()
	var changes, wg = 0, sync.WaitGroup{}
	var changesMu sync.Mutex
	for wr := range 4 {
		wg.Go(func() {
			for n := 0; time.Since(start) < churn; n++ {
				i := (wr*apps/4 + n) % apps
				s := appStatus("Synced", "Degraded", withCondition("ComparisonError", fmt.Sprintf("change %d of writer %d", n, wr)))
				if n%2 == 1 {
					s = appStatus("Synced", "Healthy")
				}
				if err := patchStatus(c, testNS, fmt.Sprintf("guestbook-c%02d", i), s); err != nil {
					t.Error(err)
					return
				}
				changesMu.Lock()
				changes++
				changesMu.Unlock()
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	// The last state: every Application Healthy but c00.
	for i := range apps {
		s := appStatus("Synced", "Healthy")
		if i == 0 {
			s = appStatus("Synced", "Degraded", withCondition("ComparisonError", "the last word"))
		}
		setStatus(t, c, testNS, fmt.Sprintf("guestbook-c%02d", i), s)
	}
	final := waitReport(t, c, testNS, "guestbook", func(r *v1alpha1.MulticlusterApplicationSetReport) error {
		if e := entryFor(r, "c00"); e == nil || len(e.Conditions) != 1 || e.Conditions[0].Message != "the last word" {
			return fmt.Errorf("entry c00 = %+v, want the last change", e)
		}
		return expectSummary(fmt.Sprintf("%d/%d/0/%d/1/0", apps, apps, apps-1))(r)
	})
	total := time.Since(start)

	mu.Lock()
	defer mu.Unlock()
	maxWrites := int(math.Ceil(total.Seconds()/interval.Seconds())) + 1
	t.Logf("%d status changes of %d Applications in %v; the report was written %d times in %v (interval %v, at most %d allowed); final resourceVersion %s",
		changes+apps, apps, elapsed.Round(time.Millisecond), len(writes), total.Round(time.Millisecond), interval, maxWrites, final.ResourceVersion)
	if len(writes) > maxWrites {
		t.Errorf("%d writes in %v, want at most one per %v (%d)", len(writes), total, interval, maxWrites)
	}
	if changes < 10*len(writes) {
		t.Errorf("only %d changes for %d writes: the test did not churn", changes, len(writes))
	}
	for i := 1; i < len(writes); i++ {
		// Two requests may leave a little closer together than their evaluations began.
		if gap := writes[i].Sub(writes[i-1]); gap < interval-250*time.Millisecond {
			t.Errorf("writes %d and %d only %v apart, want at least %v", i-1, i, gap, interval)
		}
	}
}

func TestReportRebuiltAfterRestart(t *testing.T) {
	c := hubClient(t)
	stop := startReporter(t, options(500*time.Millisecond))
	ns := namespace(t, c)
	appSet := testutil.CreateAppSet(t, c, ns, "guestbook")
	createApp(t, c, appSet, "guestbook-c1", "c1", appStatus("Synced", "Healthy"))
	createApp(t, c, appSet, "guestbook-c2", "c2", appStatus("Synced", "Healthy"))
	createApp(t, c, appSet, "guestbook-c3", "c3", appStatus("Synced", "Healthy"))
	waitReport(t, c, ns, "guestbook", expectSummary("3/3/0/3/0/0"))
	gone := testutil.CreateAppSet(t, c, ns, "gone")
	createApp(t, c, gone, "gone-c1", "c1", appStatus("Synced", "Healthy"))
	waitReport(t, c, ns, "gone", expectSummary("1/1/0/1/0/0"))
	stop()

	// While the controller is down: a status changes, a cluster leaves, a cluster joins, an ApplicationSet
	// goes, and someone deletes a report.
	setStatus(t, c, ns, "guestbook-c1", appStatus("OutOfSync", "Degraded", withCondition("SyncError", "while down")))
	app := argocd.NewApplication()
	app.SetNamespace(ns)
	app.SetName("guestbook-c3")
	deleteObject(t, c, app)
	createApp(t, c, appSet, "guestbook-c4", "c4", appStatus("Synced", "Progressing"))
	deleteObject(t, c, gone)
	report, err := getReport(c, ns, "guestbook")
	if err != nil {
		t.Fatal(err)
	}
	deleteObject(t, c, report)

	startReporter(t, options(500*time.Millisecond))
	r := waitReport(t, c, ns, "guestbook", expectSummary("3/2/1/1/2/1"))
	if e := entryFor(r, "c1"); e == nil || len(e.Conditions) != 1 || e.Conditions[0].Message != "while down" {
		t.Errorf("entry c1 = %+v, want the change made while the controller was down", e)
	}
	if e := entryFor(r, "c3"); e != nil {
		t.Errorf("the cluster removed while the controller was down still has an entry")
	}
	waitNoReport(t, c, ns, "gone")
}

// TestReportFromApplicationController runs `argocd-pull controller` as a whole: the application controller
// writes the delivery errors of Applications for a cluster that does not exist, and the report shows them.
func TestReportFromApplicationController(t *testing.T) {
	c := hubClient(t)
	opts := hubmanager.NewOptions()
	opts.MetricsAddress, opts.HealthAddress = "0", "0"
	opts.StartedMoreThanOnce = true
	opts.GitOpsCluster = false
	opts.Application.UnknownClusterRetry = time.Second
	opts.AppSetReportOptions.Interval = 500 * time.Millisecond
	if err := opts.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ctl, err := hubmanager.New(ctx, env.Hub.Config(), opts)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ctl.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("controller: %v", err)
			}
		case <-time.After(10 * time.Second):
			var b strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
			t.Errorf("the controller did not stop within 10s of its context's end; goroutines:\n%s", b.String())
			<-done
		}
	})

	ns := namespace(t, c)
	appSet := testutil.CreateAppSet(t, c, ns, "guestbook")
	createApp(t, c, appSet, "guestbook-nowhere", "no-such-cluster", nil)
	r := waitReport(t, c, ns, "guestbook", func(r *v1alpha1.MulticlusterApplicationSetReport) error {
		e := entryFor(r, "no-such-cluster")
		if e == nil || len(e.Conditions) == 0 || !strings.HasSuffix(e.Conditions[0].Type, "Error") {
			return fmt.Errorf("entry = %+v, want the delivery error", e)
		}
		return nil
	})
	t.Logf("report entry: %+v", r.Statuses.ClusterConditions[0])
	if got := summary(r); got != "1/0/1/0/1/0" {
		t.Errorf("summary %s, want 1/0/1/0/1/0", got)
	}
}

// TestNoWritesAtRest: once the report is right, the controller sends no request that writes it while nothing
// changes (a write that changes nothing is still a request the apiserver counts).
func TestNoWritesAtRest(t *testing.T) {
	c := hubClient(t)
	startReporter(t, options(200*time.Millisecond))
	ns := namespace(t, c)
	appSet := testutil.CreateAppSet(t, c, ns, "guestbook")
	createApp(t, c, appSet, "guestbook-c1", "c1", appStatus("Synced", "Healthy"))
	createApp(t, c, appSet, "guestbook-c2", "c2", appStatus("OutOfSync", "Degraded", withCondition("SyncError", "failed")))
	createApp(t, c, appSet, "guestbook-c3", "c3", nil)
	waitReport(t, c, ns, "guestbook", expectSummary("3/1/2/1/2/0"))
	time.Sleep(time.Second) // let the writes that follow the first one settle
	before := reportWrites(t)
	time.Sleep(3 * time.Second)
	if after := reportWrites(t); after != before {
		t.Fatalf("%v report writes at rest", after-before)
	}
}

// reportWrites is the hub apiserver's count of write requests to MulticlusterApplicationSetReports.
func reportWrites(t *testing.T) float64 {
	t.Helper()
	hc, err := rest.HTTPClientFor(env.Hub.Config())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(env.Hub.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "apiserver_request_total{") && strings.Contains(line, `resource="multiclusterapplicationsetreports"`) &&
			!strings.Contains(line, `verb="GET"`) && !strings.Contains(line, `verb="LIST"`) && !strings.Contains(line, `verb="WATCH"`) {
			var v float64
			_, _ = fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			total += v
		}
	}
	return total
}

// counterValue reads a counter's value.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// roundTripFunc is an http.RoundTripper of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestReportWritesWithinBudget churns the Applications of six ApplicationSets at once with a write budget
// that takes about two report writes per second, all reports together: without the budget they would be
// written twelve times per second (each at every interval). Each report still ends with the last state, and a
// report whose write is put off is not evaluated again before the write is due: about two evaluations per
// write, not one per report and interval.
func TestReportWritesWithinBudget(t *testing.T) {
	const (
		interval = 500 * time.Millisecond
		sets     = 6
		apps     = 10
		churn    = 6 * time.Second
	)
	c := hubClient(t)
	opts := options(interval)
	opts.WriteBytesPerSecond = 1000 // an interval's worth, 500 bytes, at once; every report is larger
	startReporter(t, opts)
	ns := namespace(t, c)
	for s := range sets {
		appSet := testutil.CreateAppSet(t, c, ns, fmt.Sprintf("set-%d", s))
		for i := range apps {
			createApp(t, c, appSet, fmt.Sprintf("set-%d-c%02d", s, i), fmt.Sprintf("c%02d", i), appStatus("Synced", "Healthy"))
		}
	}
	for s := range sets {
		waitReport(t, c, ns, fmt.Sprintf("set-%d", s), expectSummary(fmt.Sprintf("%d/%d/0/%d/0/0", apps, apps, apps)))
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := c.Watch(ctx, &v1alpha1.MulticlusterApplicationSetReportList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var writes atomic.Int32
	go func() {
		for ev := range w.ResultChan() {
			if ev.Type == watch.Modified {
				writes.Add(1)
			}
		}
	}()

	start := time.Now()
	evaluated := counterValue(t, appsetreport.Evaluations)
	var changes atomic.Int32
	var wg sync.WaitGroup
	for s := range sets {
		wg.Go(func() {
			for n := 0; time.Since(start) < churn; n++ {
				st := appStatus("Synced", "Degraded", withCondition("ComparisonError", fmt.Sprintf("change %d", n)))
				if n%2 == 1 {
					st = appStatus("Synced", "Healthy")
				}
				if err := patchStatus(c, ns, fmt.Sprintf("set-%d-c%02d", s, n%apps), st); err != nil {
					t.Error(err)
					return
				}
				changes.Add(1)
			}
		})
	}
	wg.Wait()
	for s := range sets {
		for i := range apps {
			st := appStatus("Synced", "Healthy")
			if i == s {
				st = appStatus("Synced", "Degraded", withCondition("ComparisonError", "the last word"))
			}
			setStatus(t, c, ns, fmt.Sprintf("set-%d-c%02d", s, i), st)
		}
	}
	for s := range sets {
		waitReport(t, c, ns, fmt.Sprintf("set-%d", s), func(r *v1alpha1.MulticlusterApplicationSetReport) error {
			if e := entryFor(r, fmt.Sprintf("c%02d", s)); e == nil || len(e.Conditions) != 1 || e.Conditions[0].Message != "the last word" {
				return fmt.Errorf("entry c%02d = %+v, want the last change", s, e)
			}
			return expectSummary(fmt.Sprintf("%d/%d/0/%d/1/0", apps, apps, apps-1))(r)
		})
	}
	total := time.Since(start)
	evaluations := int(counterValue(t, appsetreport.Evaluations) - evaluated)
	cancel()
	// Two writes per second, one burst, and a write put off per report that came due after the churn.
	maxWrites := int(math.Ceil(2*total.Seconds())) + 1 + sets
	t.Logf("%d status changes; the reports were written %d times in %v (at most %d allowed, %d without the budget) "+
		"after %d evaluations (%d at every interval)", changes.Load(), writes.Load(), total.Round(time.Millisecond), maxWrites,
		int(math.Ceil(total.Seconds()/interval.Seconds()))*sets, evaluations, int(math.Ceil(total.Seconds()/interval.Seconds()))*sets)
	if int(writes.Load()) > maxWrites {
		t.Errorf("%d report writes in %v, want at most %d", writes.Load(), total, maxWrites)
	}
	// One evaluation that puts a write off and one when it is due, for each write, and one per report that
	// found it up to date at the end.
	if maxEvaluations := 2*maxWrites + sets; evaluations > maxEvaluations {
		t.Errorf("%d evaluations in %v, want at most %d: reports whose write was put off were evaluated before it was due",
			evaluations, total, maxEvaluations)
	}
	if int(changes.Load()) < 5*maxWrites {
		t.Errorf("only %d changes: the test did not churn", changes.Load())
	}
}
