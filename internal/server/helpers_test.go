package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubetypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	workv1client "open-cluster-management.io/api/client/work/clientset/versioned/typed/work/v1"
	workv1 "open-cluster-management.io/api/work/v1"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/common"
	clientoptions "open-cluster-management.io/sdk-go/pkg/cloudevents/clients/options"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/utils"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work"
	sourcecodec "open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work/source/codec"
	workstore "open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work/store"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/clients"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc"

	"github.com/argocd-pull/argocd-pull/internal/loopback"
	"github.com/argocd-pull/argocd-pull/internal/server/internal/testclients"
	"github.com/argocd-pull/argocd-pull/internal/testutil"
)

var pg *loopback.Postgres

func TestMain(m *testing.M) {
	if os.Getenv(connChildEnv) != "" {
		os.Exit(connChild())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// The clients reconnect after this delay instead of 5-60 s, so that restart tests stay short.
	clients.DelayFn = func() time.Duration { return 300 * time.Millisecond }
	dir, err := os.MkdirTemp("", "server-pg-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	pg, err = loopback.StartPostgres(context.Background(), dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pg.Stop()
	return m.Run()
}

// testDB creates a database of the test's own.
func testDB(t testing.TB) string {
	t.Helper()
	url, err := pg.CreateDatabase(context.Background(), testutil.DatabaseName(t))
	if err != nil {
		t.Fatal(err)
	}
	return url
}

// testOptions are options for a server on loopback ports picked by the kernel.
func testOptions(dbURL, instance string) *Options {
	o := NewOptions()
	o.DatabaseURL = dbURL
	o.InstanceID = instance
	o.SourceAddress, o.AgentAddress, o.HTTPAddress = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	o.AllowAnonymous = true
	o.ShutdownTimeout = 5 * time.Second
	return o
}

// startServer starts a server and stops it when the test ends.
func startServer(t testing.TB, o *Options) *Server {
	t.Helper()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	s := New(o)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// restartOptions are the options of a stopped server, on the same addresses, so that clients come back.
func restartOptions(s *Server) *Options {
	o := *s.opts
	o.SourceAddress, o.AgentAddress, o.HTTPAddress = s.SourceAddr(), s.AgentAddr(), s.HTTPAddr()
	return &o
}

func grpcOptions(addr string) *grpc.GRPCOptions {
	return &grpc.GRPCOptions{Dialer: &grpc.GRPCDialer{URL: addr}}
}

// testSource is an unmodified sdk-go source client with an informer over its works.
type testSource struct {
	mu     sync.Mutex
	holder *work.ClientHolder
	store  *workstore.SourceInformerWatcherStore
	lister cache.Indexer
	cancel context.CancelFunc
}

func startSource(t testing.TB, config any, sourceID string, works ...*workv1.ManifestWork) *testSource {
	t.Helper()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().V(1)))
	t.Cleanup(cancel)
	// sdk-go's client starts polling whether its store is initiated as soon as it exists, so the store gets
	// its informer first; the informer reaches the client through this pointer once it is built.
	var holder atomic.Pointer[work.ClientHolder]
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return holder.Load().ManifestWorks(metav1.NamespaceAll).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return holder.Load().ManifestWorks(metav1.NamespaceAll).Watch(ctx, o)
		},
	}
	informer := cache.NewSharedIndexInformer(lw, &workv1.ManifestWork{}, 0, cache.Indexers{})
	watcherStore := workstore.NewSourceInformerWatcherStore(ctx)
	watcherStore.SetInformer(informer)
	opt := clientoptions.NewGenericClientOptions(config, sourcecodec.NewManifestBundleCodec(), sourceID+"-client").
		WithClientWatcherStore(watcherStore).
		WithSourceID(sourceID)
	h, err := work.NewSourceClientHolder(ctx, opt)
	if err != nil {
		t.Fatal(err)
	}
	holder.Store(h)
	go informer.Run(ctx.Done())
	// The informer's list and watch set the shared client's namespace too: let them finish first.
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("the source's informer did not sync")
	}
	// A restarted source rebuilds its cache (from the REST list) through its store, as sdk-go's own tests do.
	for _, w := range works {
		if err := watcherStore.Add(w); err != nil {
			t.Fatal(err)
		}
	}
	return &testSource{holder: h, store: watcherStore, lister: informer.GetIndexer(), cancel: cancel}
}

// work returns the source's cached work, or nil.
func (s *testSource) work(cluster, name string) *workv1.ManifestWork {
	obj, ok, _ := s.lister.GetByKey(cluster + "/" + name)
	if !ok {
		return nil
	}
	return obj.(*workv1.ManifestWork)
}

// testAgent is an unmodified sdk-go agent client playing a work agent in the test process (see
// testclients.Agent). Tests whose agent reconnects run it out of process instead (startRemoteAgent).
type testAgent struct {
	*testclients.Agent
	cancel context.CancelFunc
}

func startAgent(t testing.TB, config any, cluster string) *testAgent {
	t.Helper()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().V(1)))
	t.Cleanup(cancel)
	a, err := testclients.StartAgent(ctx, config, cluster)
	if err != nil {
		t.Fatal(err)
	}
	return &testAgent{Agent: a, cancel: cancel}
}

// work returns the agent client's copy of a work, or nil.
func (a *testAgent) work(name string) *workv1.ManifestWork { return a.Work(context.Background(), name) }

// manifestNames is the names of a work's ConfigMaps, joined: what the test agent reports.
func manifestNames(w *workv1.ManifestWork) string { return testclients.ManifestNames(w) }

// newWork is a ManifestWork of ConfigMaps with the given names.
func newWork(cluster, name string, configMaps ...string) *workv1.ManifestWork {
	return testclients.NewWork(cluster, name, configMaps...)
}

func manifests(configMaps ...string) []workv1.Manifest { return testclients.Manifests(configMaps...) }

// manifestsPatch is a merge patch that replaces a work's manifests.
func manifestsPatch(t testing.TB, configMaps ...string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"spec": map[string]any{"workload": map[string]any{"manifests": manifests(configMaps...)}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// appliedMessage is the message of the Applied condition the source holds for a work, or "".
func appliedMessage(s *testSource, cluster, name string) string {
	return appliedOf(s.work(cluster, name))
}

// appliedOf is the message of a work's Applied condition, or "".
func appliedOf(w *workv1.ManifestWork) string {
	if w == nil {
		return ""
	}
	if c := meta.FindStatusCondition(w.Status.Conditions, workv1.WorkApplied); c != nil {
		return c.Message
	}
	return ""
}

// createConsumer registers a consumer directly.
func createConsumer(t testing.TB, s *Server, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := s.store.EnsureConsumer(context.Background(), n); err != nil {
			t.Fatal(err)
		}
	}
}

// works2UID is the resource id the sdk-go source client gives a work.
func works2UID(source, cluster, name string) kubetypes.UID {
	return kubetypes.UID(utils.UID(source, common.ManifestWorkGR.String(), cluster, name))
}

// works returns the source's client for a cluster. sdk-go's client holder shares one client whose
// namespace each call of ManifestWorks sets, so it is fetched right before every use.
func (s *testSource) works(cluster string) workv1client.ManifestWorkInterface {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holder.ManifestWorks(cluster)
}

// removeRow deletes a resource behind the server's back, as if it had been lost.
func removeRow(t testing.TB, s *Server, id kubetypes.UID) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), s.opts.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(context.Background(), "DELETE FROM resources WHERE id = $1", string(id)); err != nil {
		t.Fatal(err)
	}
}
