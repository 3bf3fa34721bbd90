package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	workclientset "open-cluster-management.io/api/client/work/clientset/versioned"
	workv1 "open-cluster-management.io/api/work/v1"
	grpcoptions "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc"

	"github.com/argocd-pull/argocd-pull/internal/application"
	"github.com/argocd-pull/argocd-pull/internal/appstatus"
	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/server"
	"github.com/argocd-pull/argocd-pull/internal/server/servertest"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// hubSide is how a test delivers works and reads their status: the hub controller's side of a transport.
type hubSide interface {
	apply(ctx context.Context, w *workv1.ManifestWork) error
	delete(ctx context.Context, namespace, name string) error
	get(ctx context.Context, namespace, name string) (*workv1.ManifestWork, error)
}

// grpcHub is the grpc transport of the hub controller (internal/workclient), against argocd-pull server.
type grpcHub struct{ g *workclient.GRPC }

func (h grpcHub) apply(ctx context.Context, w *workv1.ManifestWork) error { return h.g.Apply(ctx, w) }
func (h grpcHub) delete(ctx context.Context, ns, name string) error       { return h.g.Delete(ctx, ns, name) }
func (h grpcHub) get(ctx context.Context, ns, name string) (*workv1.ManifestWork, error) {
	return h.g.Get(ctx, ns, name)
}

// kubeHub writes ManifestWorks on the hub apiserver, as the kube transport of the hub controller does.
type kubeHub struct{ cs workclientset.Interface }

func (h kubeHub) apply(ctx context.Context, w *workv1.ManifestWork) error {
	works := h.cs.WorkV1().ManifestWorks(w.Namespace)
	if _, err := works.Create(ctx, w, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		return err
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := works.Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Labels, cur.Annotations, cur.Spec = w.Labels, w.Annotations, w.Spec
		_, err = works.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

func (h kubeHub) delete(ctx context.Context, ns, name string) error {
	return h.cs.WorkV1().ManifestWorks(ns).Delete(ctx, name, metav1.DeleteOptions{})
}

func (h kubeHub) get(ctx context.Context, ns, name string) (*workv1.ManifestWork, error) {
	return h.cs.WorkV1().ManifestWorks(ns).Get(ctx, name, metav1.GetOptions{})
}

// startServer runs argocd-pull server on a database of its own; consumers register on first use.
func startServer(t testing.TB) *server.Server {
	t.Helper()
	return servertest.Start(t, postgres(t), func(o *server.Options) { o.AutoRegisterConsumers = true })
}

// startSource connects the hub controller's grpc transport to the server.
func startSource(t testing.TB, s *server.Server) *workclient.GRPC {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "source.yaml")
	if err := os.WriteFile(cfg, []byte("url: "+s.SourceAddr()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	g, err := workclient.NewGRPC(ctx, workclient.GRPCOptions{ConfigFile: cfg, RESTURL: "http://" + s.HTTPAddr(),
		SourceID: "argocd-pull", PublishQPS: 2000, PublishBurst: 2000, PageSize: 500})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	return g
}

// events records what the fleet's hooks report.
type events struct {
	mu                       sync.Mutex
	applied, synced, deleted map[string]int
	sent                     atomic.Int64
}

func newEvents() *events {
	return &events{applied: map[string]int{}, synced: map[string]int{}, deleted: map[string]int{}}
}

func (e *events) hooks() Hooks {
	rec := func(m map[string]int) func(Event) {
		return func(ev Event) {
			if ev.HubName == "" || ev.At.IsZero() {
				panic(fmt.Sprintf("incomplete event %+v", ev))
			}
			e.mu.Lock()
			m[ev.Cluster+"/"+ev.Work]++
			e.mu.Unlock()
		}
	}
	return Hooks{Applied: rec(e.applied), Synced: rec(e.synced), Deleted: rec(e.deleted),
		StatusSent: func(Event) { e.sent.Add(1) }}
}

func (e *events) count(m map[string]int) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(m)
}

func startFleet(t testing.TB, cfg Config) *Fleet {
	t.Helper()
	f, err := NewFleet(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The fleet lives as long as Start's context.
	if err := f.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	return f
}

// testArgo is the simulated Argo CD of the integration tests.
func testArgo() ArgoConfig {
	return ArgoConfig{SyncDelay: time.Second, InvalidRepo: regexp.MustCompile(`invalid\.example\.com`), ResourcesPerApp: 2}
}

const (
	goodRepo    = "https://git.example.com/apps.git"
	invalidRepo = "https://invalid.example.com/apps.git"
)

// delivered is one work the scenario delivered.
type delivered struct {
	cluster string
	hub     string // hub Application name
	work    string
	invalid bool
}

// hubStatus reads a work's delivery as the hub controller does.
func hubStatus(ctx context.Context, h hubSide, d delivered) (appstatus.Delivery, error) {
	w, err := h.get(ctx, d.cluster, d.work)
	if err != nil {
		return appstatus.Delivery{}, err
	}
	return appstatus.FromWork(w, appstatus.Options{Now: time.Now()}), nil
}

// simView describes what the simulated cluster holds of a delivery, for a failure message.
func simView(f *Fleet, d delivered) string {
	app, _ := f.Application(d.cluster, d.work)
	c := f.cluster(d.cluster)
	w, _ := f.tr.get(c, d.work)
	c.mu.Lock()
	sw := c.works[d.work]
	var sent string
	if sw != nil {
		sent = fmt.Sprintf("gen %d sentGen %d sentChange %d changedAt %d due %d", sw.gen, sw.sentGen, sw.sentChange, sw.app.changedAt, sw.app.due)
	}
	c.mu.Unlock()
	var cached string
	if w != nil {
		b, _ := json.Marshal(w.Status.ResourceStatus)
		cached = fmt.Sprintf("rv %s gen %d status %s", w.ResourceVersion, w.Generation, b)
	}
	return fmt.Sprintf("simulated %s/%s op %s (%s); cached work %s; stats %+v", app.Sync, app.Health, app.OperationPhase, sent, cached, f.Stats())
}

func field(status map[string]any, path ...string) any {
	var v any = status
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// runScenario delivers three Applications to every cluster (one of the first cluster's to an unreadable
// repository, one per cluster through a Namespace manifest), waits for their status on the hub, runs an
// operation from the hub, checks that a fleet at rest sends nothing, flips one Application and runs churn, and
// deletes the works of one cluster.
func runScenario(t *testing.T, h hubSide, f *Fleet, ev *events, clusters []string) {
	ctx := context.Background()
	var all []delivered
	for i, c := range clusters {
		for _, suffix := range []string{"a", "b", "c"} {
			name := fmt.Sprintf("app-%d-%s", i, suffix)
			repo := goodRepo
			if i == 0 && suffix == "c" {
				repo = invalidRepo
			}
			hub := hubApplication(name, repo, nil)
			if suffix == "b" {
				hub.SetAnnotations(map[string]string{argocd.AnnotationAppNamespace: "team-b"})
			}
			w, err := application.BuildWork(hub, application.BuildOptions{Cluster: c, SpokeArgoCDNamespace: "argocd"})
			if err != nil {
				t.Fatal(err)
			}
			if err := h.apply(ctx, w); err != nil {
				t.Fatal(err)
			}
			all = append(all, delivered{cluster: c, hub: name, work: w.Name, invalid: repo == invalidRepo})
		}
	}
	start := time.Now()
	testutil.EventuallyWithin(t, 90*time.Second, "every Application's status on the hub", func() error {
		for _, d := range all {
			got, err := hubStatus(ctx, h, d)
			if err != nil {
				return err
			}
			sync, health := field(got.Status, "sync", "status"), field(got.Status, "health", "status")
			switch {
			case !got.Applied:
				return fmt.Errorf("%s/%s is not applied", d.cluster, d.hub)
			case len(got.Conditions) > 0:
				return fmt.Errorf("%s/%s has delivery conditions %+v", d.cluster, d.hub, got.Conditions)
			case d.invalid:
				conds, _ := got.Status["conditions"].([]any)
				if sync != SyncUnknown || health != HealthHealthy || len(conds) != 1 || field(conds[0].(map[string]any), "type") != "ComparisonError" {
					return fmt.Errorf("%s/%s: %v/%v conditions %v, want Unknown/Healthy and a ComparisonError", d.cluster, d.hub, sync, health, conds)
				}
			case sync != SyncSynced || health != HealthHealthy:
				return fmt.Errorf("%s/%s is %v/%v; %s", d.cluster, d.hub, sync, health, simView(f, d))
			case len(got.Status["resources"].([]any)) != 2 || field(got.Status, "operationState", "phase") != PhaseSucceeded:
				return fmt.Errorf("%s/%s: status %v", d.cluster, d.hub, got.Status)
			}
		}
		return nil
	})
	t.Logf("%d Applications on %d clusters Synced/Healthy on the hub after %s", len(all), len(clusters), time.Since(start).Round(time.Millisecond))
	// The fleet counts a status once the transport has sent it, which can be after the hub has it.
	n := int64(len(all))
	testutil.EventuallyWithin(t, 5*time.Second, "the fleet's counts", func() error {
		s := f.Stats()
		if s.Works != n || s.Applications != n || s.SyncedHealthy != n-1 || s.Applied < uint64(n) || s.Connected != len(clusters) {
			return fmt.Errorf("stats = %+v, want %d works and Applications, %d synced", s, n, n-1)
		}
		if ev.count(ev.applied) != len(all) || ev.count(ev.synced) != len(all)-1 {
			return fmt.Errorf("hooks: %d applied, %d synced; want %d and %d", ev.count(ev.applied), ev.count(ev.synced), len(all), len(all)-1)
		}
		return nil
	})
	if app, ok := f.Application(all[1].cluster, all[1].work); !ok || app.Namespace != "team-b" || app.Sync != SyncSynced {
		t.Errorf("simulated application = %+v", app)
	}
	views := map[string]ApplicationView{}
	for _, v := range f.Applications() {
		views[v.Cluster+"/"+v.Work] = v
	}
	for _, d := range all {
		v, ok := views[d.cluster+"/"+d.work]
		wantSync := SyncSynced
		if d.invalid {
			wantSync = SyncUnknown
		}
		if !ok || v.HubName != d.hub || v.HubNamespace != "argocd" || v.Name != d.hub || v.Sync != wantSync || v.Health != HealthHealthy ||
			(!d.invalid && (v.Revision == "" || v.OperationPhase != PhaseSucceeded)) {
			t.Errorf("Applications() lists %s/%s as %+v", d.cluster, d.work, v)
		}
	}
	if len(views) != len(all) {
		t.Errorf("Applications() lists %d, want %d", len(views), len(all))
	}

	// An operation from the hub runs on the cluster, with its initiator, and lands in the history.
	target := all[0]
	hub := hubApplication(target.hub, goodRepo, manualSync)
	w, err := application.BuildWork(hub, application.BuildOptions{Cluster: target.cluster, SpokeArgoCDNamespace: "argocd"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.apply(ctx, w); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, 30*time.Second, "the operation from the hub", func() error {
		got, err := hubStatus(ctx, h, target)
		if err != nil {
			return err
		}
		op, _ := got.Status["operationState"].(map[string]any)
		history, _ := got.Status["history"].([]any)
		if field(op, "operation", "initiatedBy", "username") != "admin" || op["phase"] != PhaseSucceeded || len(history) != 2 ||
			field(history[1].(map[string]any), "initiatedBy", "username") != "admin" {
			return fmt.Errorf("operationState %v, history %v", op, history)
		}
		return nil
	})

	// At rest nothing is sent.
	time.Sleep(500 * time.Millisecond)
	before := f.Stats().StatusUpdates
	time.Sleep(2 * time.Second)
	if after := f.Stats().StatusUpdates; after != before {
		t.Errorf("%d status updates at rest", after-before)
	}

	// A change on demand reaches the hub.
	flipped := all[len(all)-2]
	sent, err := f.Flip(ctx, flipped.cluster, flipped.work, false)
	if err != nil {
		t.Fatal(err)
	}
	if sent.Health != HealthDegraded || sent.HubName != flipped.hub {
		t.Errorf("flip sent %+v", sent)
	}
	testutil.EventuallyWithin(t, 10*time.Second, "the flipped health on the hub", func() error {
		got, err := hubStatus(ctx, h, flipped)
		if err != nil {
			return err
		}
		if health := field(got.Status, "health", "status"); health != HealthDegraded {
			return fmt.Errorf("health %v", health)
		}
		return nil
	})
	t.Logf("a flipped health was sent %s after the change and seen on the hub %s after it was sent",
		sent.At.Sub(sent.ChangedAt).Round(100*time.Microsecond), time.Since(sent.At).Round(100*time.Microsecond))
	if _, err := f.Flip(ctx, clusters[0], all[2].work, false); !errors.Is(err, ErrNotSettled) {
		t.Errorf("flip of the invalid Application: %v, want ErrNotSettled", err)
	}
	if _, err := f.Flip(ctx, clusters[0], "no-such-work", false); !errors.Is(err, ErrNotFound) {
		t.Errorf("flip of a missing work: %v, want ErrNotFound", err)
	}

	// Churn changes statuses while it is on, and stops.
	sentBefore := ev.sent.Load()
	f.SetChurn(40)
	testutil.EventuallyWithin(t, 20*time.Second, "churn", func() error {
		if c := f.Stats().ChurnChanges; c < 20 {
			return fmt.Errorf("%d churn changes", c)
		}
		return nil
	})
	f.SetChurn(0)
	churned := f.Stats().ChurnChanges
	testutil.EventuallyWithin(t, 20*time.Second, "churned statuses sent", func() error {
		if sent := ev.sent.Load() - sentBefore; sent < 10 {
			return fmt.Errorf("%d statuses sent", sent)
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond)
	if c := f.Stats().ChurnChanges; c != churned {
		t.Errorf("churn went on after it was turned off: %d changes, then %d", churned, c)
	}

	// Deleting the works of one cluster removes its Applications and the works.
	gone := clusters[1]
	for _, d := range all {
		if d.cluster == gone {
			if err := h.delete(ctx, d.cluster, d.work); err != nil {
				t.Fatal(err)
			}
		}
	}
	testutil.EventuallyWithin(t, 30*time.Second, "deletion", func() error {
		if works := f.Works(gone); len(works) > 0 {
			return fmt.Errorf("cluster %s still holds %v", gone, works)
		}
		for _, d := range all {
			if d.cluster != gone {
				continue
			}
			if _, err := h.get(ctx, d.cluster, d.work); !apierrors.IsNotFound(err) {
				return fmt.Errorf("work %s/%s: %v", d.cluster, d.work, err)
			}
		}
		return nil
	})
	testutil.EventuallyWithin(t, 5*time.Second, "the fleet's counts after deletion", func() error {
		if s := f.Stats(); s.Deletions != 3 || s.Works != n-3 || ev.count(ev.deleted) != 3 {
			return fmt.Errorf("stats %+v, %d deleted hooks", s, ev.count(ev.deleted))
		}
		return nil
	})
	if s := f.Stats(); s.Errors > 0 {
		t.Logf("%d retried errors", s.Errors)
	}
}

// TestGRPCFleet runs the scenario with 20 simulated clusters, each an sdk-go agent client on its own gRPC
// connection to argocd-pull server on PostgreSQL, and the hub controller's grpc transport as the source.
func TestGRPCFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	s := startServer(t)
	g := startSource(t, s)
	ev := newEvents()
	clusters := ClusterNames("sim-grpc-", 1, 20)
	f := startFleet(t, Config{
		Transport: workclient.TransportGRPC,
		GRPC:      &grpcoptions.GRPCOptions{Dialer: &grpcoptions.GRPCDialer{URL: s.AgentAddr()}},
		Clusters:  clusters,
		Argo:      testArgo(),
		Workers:   4,
		Hooks:     ev.hooks(),
	})
	runScenario(t, grpcHub{g}, f, ev, clusters)
}

// TestKubeFleet runs the scenario with 10 simulated clusters on a real hub apiserver, each watching the
// ManifestWorks of its namespace, as the work agents do.
func TestKubeFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	env := hubEnv(t)
	clusters := ClusterNames("sim-kube-", 1, 10)
	core := kubernetes.NewForConfigOrDie(env.Hub.Config())
	for _, c := range clusters {
		if _, err := core.CoreV1().Namespaces().Create(context.Background(),
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cs := workclientset.NewForConfigOrDie(env.Hub.Config())
	ev := newEvents()
	hubConfig := env.Hub.Config()
	hubConfig.QPS, hubConfig.Burst = 200, 400
	f := startFleet(t, Config{Transport: workclient.TransportKube, Hub: hubConfig, Clusters: clusters, Argo: testArgo(), Workers: 4, Hooks: ev.hooks()})
	// One watch of its namespace's works per cluster, none of every namespace's. Start returns once every
	// cluster has listed its works; the watch that follows the list reaches the apiserver a moment later.
	want := map[string]int{"namespace": len(clusters)}
	testutil.EventuallyWithin(t, 10*time.Second, "one watch of ManifestWorks per cluster", func() error {
		got := manifestWorkWatches(t, core)
		if got["namespace"] > want["namespace"] || len(got) > len(want) {
			t.Fatalf("watches of ManifestWorks by scope %v, want %v", got, want)
		}
		if !maps.Equal(got, want) {
			return fmt.Errorf("watches of ManifestWorks by scope %v, want %v", got, want)
		}
		return nil
	})
	runScenario(t, kubeHub{cs}, f, ev, clusters)

	// The agent's finalizer was on every work it took, and the status fits the hub CRD's raw limit.
	list, err := cs.WorkV1().ManifestWorks(clusters[0]).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range list.Items {
		if !slices.Contains(w.Finalizers, workv1.ManifestWorkFinalizer) {
			t.Errorf("work %s has finalizers %v", w.Name, w.Finalizers)
		}
		for _, m := range w.Status.ResourceStatus.Manifests {
			for _, v := range m.StatusFeedbacks.Values {
				if v.Value.JsonRaw != nil && len(*v.Value.JsonRaw) > workclient.KubeMaxJSONRawLength {
					t.Errorf("work %s: feedback %s is %d long", w.Name, v.Name, len(*v.Value.JsonRaw))
				}
			}
		}
	}
	data, _ := json.Marshal(list.Items[0].Status)
	t.Logf("a work's status on the hub is %d bytes", len(data))
}

// manifestWorkWatches counts the hub apiserver's open watches of ManifestWorks by scope (namespace, cluster),
// from its metrics.
func manifestWorkWatches(t *testing.T, core kubernetes.Interface) map[string]int {
	t.Helper()
	data, err := core.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	scope := regexp.MustCompile(`scope="([a-z]+)"`)
	watches := map[string]int{}
	for line := range strings.Lines(string(data)) {
		if !strings.HasPrefix(line, "apiserver_longrunning_requests{") || !strings.Contains(line, `resource="manifestworks"`) ||
			!strings.Contains(line, `verb="WATCH"`) {
			continue
		}
		fields := strings.Fields(line)
		n, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		if m := scope.FindStringSubmatch(line); m != nil && n > 0 {
			watches[m[1]] += int(n)
		}
	}
	return watches
}
