package workclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubetypes "k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	workinformers "open-cluster-management.io/api/client/work/informers/externalversions"
	workv1 "open-cluster-management.io/api/work/v1"
	clientoptions "open-cluster-management.io/sdk-go/pkg/cloudevents/clients/options"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work"
	agentcodec "open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work/agent/codec"
	workstore "open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work/store"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/clients"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/reconnect"
	"github.com/argocd-pull/argocd-pull/internal/server"
	"github.com/argocd-pull/argocd-pull/internal/server/restapi"
	"github.com/argocd-pull/argocd-pull/internal/server/servertest"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

var pg *loopback.Postgres

func TestMain(m *testing.M) {
	klog.InitFlags(nil)
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	reconnect.Install() // for reconnect.OnStuck
	clients.DelayFn = func() time.Duration { return 300 * time.Millisecond }
	dir, err := os.MkdirTemp("", "workclient-pg-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if pg, err = loopback.StartPostgres(context.Background(), dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pg.Stop()
	return m.Run()
}

// startServer runs argocd-pull server on its own database and registers the consumers.
func startServer(t *testing.T, consumers ...string) *server.Server {
	t.Helper()
	return startServerAt(t, servertest.NewDatabase(t, pg), serverAddrs{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"}, consumers...)
}

// serverAddrs are the server's source, agent and HTTP addresses.
type serverAddrs struct{ source, agent, http string }

// freeAddrs returns addresses for a server that starts later.
func freeAddrs(t *testing.T) serverAddrs {
	t.Helper()
	source, agent, http := servertest.FreeAddresses(t)
	return serverAddrs{source, agent, http}
}

// startServerAt runs argocd-pull server on a database and addresses, and registers the consumers.
func startServerAt(t *testing.T, db string, addrs serverAddrs, consumers ...string) *server.Server {
	t.Helper()
	o := servertest.Options(db)
	o.SourceAddress, o.AgentAddress, o.HTTPAddress = addrs.source, addrs.agent, addrs.http
	s := servertest.Run(t, o)
	rest := servertest.Client(t, s)
	for _, c := range consumers {
		if _, err := rest.CreateConsumer(context.Background(), restapi.Consumer{Name: c}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// startTransport starts the grpc transport against the server and waits until it has listed the works; it
// stops with the returned cancel.
func startTransport(t *testing.T, s *server.Server) (*workclient.GRPC, context.CancelFunc) {
	t.Helper()
	g, cancel := startTransportAt(t, s.SourceAddr(), s.HTTPAddr())
	ctx, done := context.WithTimeout(context.Background(), 30*time.Second)
	defer done()
	if err := g.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	return g, cancel
}

// startTransportAt starts the grpc transport against a server's source and HTTP addresses, whether a server
// listens there or not.
func startTransportAt(t *testing.T, sourceAddr, httpAddr string) (*workclient.GRPC, context.CancelFunc) {
	t.Helper()
	return startTransportWith(t, context.Background(), sourceAddr, httpAddr)
}

// startTransportWith is startTransportAt with the transport's context, and options changed by opts.
func startTransportWith(t *testing.T, ctx context.Context, sourceAddr, httpAddr string, opts ...func(*workclient.GRPCOptions)) (*workclient.GRPC, context.CancelFunc) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "grpc.yaml")
	if err := os.WriteFile(cfg, []byte("url: "+sourceAddr+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	o := workclient.GRPCOptions{
		ConfigFile: cfg, RESTURL: "http://" + httpAddr, SourceID: "argocd-pull",
		PublishQPS: 1000, PublishBurst: 1000, PageSize: 2, Publishers: 3,
	}
	for _, opt := range opts {
		opt(&o)
	}
	g, err := workclient.NewGRPC(ctx, o)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	return g, cancel
}

// agent is an unmodified sdk-go agent client that reports every spec it receives as applied, and confirms
// deletions as the work agent does. A client that sdk-go leaves stuck on a closed connection is replaced, as
// argocd-pull agent replaces its work agent (reconnect.RestartWhenStuck): on a loaded machine the race happens
// in these tests too.
type agent struct {
	mu       sync.Mutex
	received map[string]int64 // work name -> last generation received
	holder   *work.ClientHolder
	cluster  string
	runs     atomic.Int32 // clients started: the first, and one for each restart
	stopped  chan error   // what reconnect.RestartWhenStuck returned, once the agent's context ended
}

func startAgent(t *testing.T, s *server.Server, cluster string) *agent {
	t.Helper()
	return startAgentAt(t, context.Background(), s.AgentAddr(), cluster)
}

// startAgentAt starts an agent with ctx (its logger, say) against a server's agent address, whether a server
// listens there or not; it stops when ctx ends or the test does.
func startAgentAt(t *testing.T, ctx context.Context, addr, cluster string) *agent {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	a := &agent{received: map[string]int64{}, cluster: cluster, stopped: make(chan error, 1)}
	started := make(chan error, 1)
	go func() {
		a.stopped <- reconnect.RestartWhenStuck(ctx, func(ctx context.Context) error {
			err := a.run(ctx, addr, started)
			if err != nil {
				select {
				case started <- err:
				default:
				}
			}
			return err
		})
	}()
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	return a
}

// run connects a client and handles its works until ctx ends; it says on started once it handles them.
func (a *agent) run(ctx context.Context, addr string, started chan<- error) error {
	a.runs.Add(1)
	opt := clientoptions.NewGenericClientOptions(&grpc.GRPCOptions{Dialer: &grpc.GRPCDialer{URL: addr}},
		agentcodec.NewManifestBundleCodec(), a.cluster+"-agent").
		WithClientWatcherStore(workstore.NewAgentInformerWatcherStore()).WithClusterName(a.cluster)
	holder, err := work.NewAgentClientHolder(ctx, opt)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.holder = holder
	a.mu.Unlock()
	inf := workinformers.NewSharedInformerFactoryWithOptions(holder.WorkInterface(), 0, workinformers.WithNamespace(a.cluster)).Work().V1().ManifestWorks().Informer()
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.handle(ctx, obj.(*workv1.ManifestWork)) },
		UpdateFunc: func(_, obj any) { a.handle(ctx, obj.(*workv1.ManifestWork)) },
	}); err != nil {
		return err
	}
	select {
	case started <- nil:
	default:
	}
	inf.Run(ctx.Done())
	return nil
}

func (a *agent) handle(ctx context.Context, w *workv1.ManifestWork) {
	a.mu.Lock()
	works := a.holder.ManifestWorks(a.cluster)
	a.mu.Unlock()
	if !w.DeletionTimestamp.IsZero() {
		if len(w.Finalizers) > 0 {
			_, _ = works.Patch(ctx, w.Name, kubetypes.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		}
		return
	}
	a.mu.Lock()
	a.received[w.Name] = w.Generation
	a.mu.Unlock()
	if c := meta.FindStatusCondition(w.Status.Conditions, workv1.WorkApplied); c != nil && c.ObservedGeneration == w.Generation {
		return
	}
	status := workv1.ManifestWorkStatus{Conditions: []metav1.Condition{{Type: workv1.WorkApplied, Status: metav1.ConditionTrue,
		Reason: "Applied", ObservedGeneration: w.Generation, LastTransitionTime: metav1.Now()}}}
	patch, _ := json.Marshal(map[string]any{"status": status})
	// Retried like a controller does: the sdk-go agent store tells its watchers of a new generation before it
	// stores it, so a status patched right away can go out for the previous generation; the server refuses
	// it, or the client reports a conflict.
	for ctx.Err() == nil {
		sent, err := works.Patch(ctx, w.Name, kubetypes.MergePatchType, patch, metav1.PatchOptions{}, "status")
		if err == nil && sent.Generation == w.Generation {
			return
		}
		time.Sleep(100 * time.Millisecond)
		if cur, err := works.Get(ctx, w.Name, metav1.GetOptions{}); err != nil || cur.Generation != w.Generation {
			return
		}
	}
}

func (a *agent) generation(name string) int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.received[name]
}

func pullWork(cluster, name, data string) *workv1.ManifestWork {
	w := &workv1.ManifestWork{ObjectMeta: metav1.ObjectMeta{Namespace: cluster, Name: name,
		Labels:      map[string]string{argocd.LabelPull: "true"},
		Annotations: map[string]string{argocd.AnnotationHubAppNamespace: "argocd", argocd.AnnotationHubAppName: name}}}
	raw := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":"default"},"data":{"k":%q}}`, name, data)
	w.Spec.Workload.Manifests = []workv1.Manifest{{RawExtension: runtime.RawExtension{Raw: []byte(raw)}}}
	return w
}

func appliedAt(g *workclient.GRPC, cluster, name string, gen int64) error {
	w, err := g.Get(context.Background(), cluster, name)
	if err != nil {
		return err
	}
	c := meta.FindStatusCondition(w.Status.Conditions, workv1.WorkApplied)
	if c == nil || c.ObservedGeneration != gen || w.Generation != gen {
		return fmt.Errorf("work at generation %d, applied condition %+v; want %d", w.Generation, c, gen)
	}
	return nil
}

// TestGRPCTransport: works published through the grpc transport reach the agent, their status comes back to the
// store and its handlers, updates raise the version, a restarted transport rebuilds from the server's paged
// list and goes on from the listed versions, and a deletion completes once the agent confirms it.
func TestGRPCTransport(t *testing.T) {
	ctx := context.Background()
	s := startServer(t, "cluster1")
	a := startAgent(t, s, "cluster1")
	g, stop := startTransport(t, s)

	var mu sync.Mutex
	events := map[string]int{}
	_, _ = g.Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { mu.Lock(); events["add"]++; mu.Unlock() },
		UpdateFunc: func(any, any) { mu.Lock(); events["update"]++; mu.Unlock() },
		DeleteFunc: func(any) { mu.Lock(); events["delete"]++; mu.Unlock() },
	})

	for _, name := range []string{"a", "b", "c"} {
		if err := g.Apply(ctx, pullWork("cluster1", name, "v1")); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"a", "b", "c"} {
		testutil.Eventually(t, "applied "+name, func() error { return appliedAt(g, "cluster1", name, 1) })
	}
	if err := g.Apply(ctx, pullWork("cluster1", "a", "v2")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "update applied", func() error { return appliedAt(g, "cluster1", "a", 2) })
	if works, _ := g.ListForApplication(ctx, "argocd", "a"); len(works) != 1 || works[0].Name != "a" {
		t.Fatalf("works of application a = %v", works)
	}
	mu.Lock()
	if events["add"] != 3 || events["update"] < 4 {
		t.Errorf("events = %v, want 3 adds and an update per status", events)
	}
	mu.Unlock()

	err := g.Apply(ctx, pullWork("no-such-cluster", "x", "v1"))
	if !errors.Is(err, workclient.ErrUnknownCluster) {
		t.Fatalf("apply to an unknown cluster: %v, want ErrUnknownCluster", err)
	}

	// A new transport (a controller restart) lists the works with their status and versions (page size 2).
	stop()
	g2, _ := startTransport(t, s)
	for _, name := range []string{"b", "c"} {
		if err := appliedAt(g2, "cluster1", name, 1); err != nil {
			t.Fatalf("after restart, %s: %v", name, err)
		}
	}
	if err := appliedAt(g2, "cluster1", "a", 2); err != nil {
		t.Fatalf("after restart, a: %v", err)
	}
	if err := g2.Apply(ctx, pullWork("cluster1", "a", "v3")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "version goes on from the listed one", func() error {
		if a.generation("a") != 3 {
			return fmt.Errorf("agent has generation %d", a.generation("a"))
		}
		return appliedAt(g2, "cluster1", "a", 3)
	})

	if err := g2.Delete(ctx, "cluster1", "b"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "deleted once the agent confirmed", func() error {
		if _, err := g2.Get(ctx, "cluster1", "b"); !apierrors.IsNotFound(err) {
			return fmt.Errorf("work b: %v", err)
		}
		return nil
	})
}

// TestStartBeforeServer: the transport starts while no server listens (a controller that comes up first, or
// again before the server). It is neither synced nor ready and says why; once the server is up it lists the
// works, becomes ready and delivers. While the server is away again it is not ready, and it is ready and
// delivers again once a server is back on the same database.
func TestStartBeforeServer(t *testing.T) {
	ctx := context.Background()
	addrs := freeAddrs(t)
	g, _ := startTransportAt(t, addrs.source, addrs.http)
	time.Sleep(time.Second)
	if g.Informer().HasSynced() {
		t.Fatal("synced without a server")
	}
	if err := g.Ready(ctx); err == nil || !strings.Contains(err.Error(), "not listed") {
		t.Fatalf("ready without a server: %v", err)
	}

	db := servertest.NewDatabase(t, pg)
	s := startServerAt(t, db, addrs, "cluster1")
	startAgent(t, s, "cluster1")
	testutil.Eventually(t, "the transport to list the works and be ready", func() error {
		if !g.Informer().HasSynced() {
			return errors.New("not synced")
		}
		return g.Ready(ctx)
	})
	if err := g.Apply(ctx, pullWork("cluster1", "w", "v1")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the work applied", func() error { return appliedAt(g, "cluster1", "w", 1) })

	s.Stop()
	testutil.Eventually(t, "not ready while the server is away", func() error {
		if g.Ready(ctx) == nil {
			return errors.New("still ready")
		}
		return nil
	})
	startServerAt(t, db, addrs)
	testutil.Eventually(t, "ready again", func() error { return g.Ready(ctx) })
	testutil.Eventually(t, "an update published after the server's restart", func() error {
		return g.Apply(ctx, pullWork("cluster1", "w", "v2"))
	})
	testutil.Eventually(t, "the update applied", func() error { return appliedAt(g, "cluster1", "w", 2) })
}
