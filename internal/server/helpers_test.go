package server

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
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
	workinformers "open-cluster-management.io/api/client/work/informers/externalversions"
	workv1 "open-cluster-management.io/api/work/v1"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/common"
	clientoptions "open-cluster-management.io/sdk-go/pkg/cloudevents/clients/options"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/utils"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work"
	agentcodec "open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work/agent/codec"
	sourcecodec "open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work/source/codec"
	workstore "open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work/store"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/clients"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc"

	"github.com/argocd-pull/argocd-pull/internal/testenv"
)

var pg *testenv.Postgres

func TestMain(m *testing.M) {
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
	pg, err = testenv.StartPostgres(context.Background(), dir)
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
	name := strings.ToLower(strings.NewReplacer("/", "_", "-", "_", "#", "_").Replace(t.Name()))
	url, err := pg.CreateDatabase(context.Background(), name)
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

// testAgent is an unmodified sdk-go agent client playing a work agent: it reports every spec it receives
// as applied, with the work's generation and the names of its manifests in the Applied condition. It
// polls the client's store through one namespaced client: sdk-go's client holder sets the namespace of a
// shared client on every ManifestWorks call, which is not safe from several goroutines.
type testAgent struct {
	cluster string
	holder  *work.ClientHolder
	client  workv1client.ManifestWorkInterface
	silent  atomic.Bool
	cancel  context.CancelFunc
	// received counts spec deliveries: changes of the store's resource version of the agent's works.
	received atomic.Int64
}

func startAgent(t testing.TB, config any, cluster string) *testAgent {
	t.Helper()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().V(1)))
	t.Cleanup(cancel)
	opt := clientoptions.NewGenericClientOptions(config, agentcodec.NewManifestBundleCodec(), cluster+"-agent").
		WithClientWatcherStore(workstore.NewAgentInformerWatcherStore()).
		WithClusterName(cluster)
	holder, err := work.NewAgentClientHolder(ctx, opt)
	if err != nil {
		t.Fatal(err)
	}
	// sdk-go's agent store hands every change to a watch and blocks until it is read: an informer reads it.
	factory := workinformers.NewSharedInformerFactoryWithOptions(holder.WorkInterface(), 0, workinformers.WithNamespace(cluster))
	informer := factory.Work().V1().ManifestWorks().Informer()
	go informer.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("the agent's informer did not sync")
	}
	a := &testAgent{cluster: cluster, holder: holder, client: holder.ManifestWorks(cluster), cancel: cancel}
	go a.loop(ctx, t)
	return a
}

func (a *testAgent) loop(ctx context.Context, t testing.TB) {
	seen := map[string]string{}
	for ctx.Err() == nil {
		list, err := a.client.List(ctx, metav1.ListOptions{})
		if err == nil {
			for i := range list.Items {
				w := &list.Items[i]
				if seen[w.Name] != w.ResourceVersion {
					seen[w.Name] = w.ResourceVersion
					a.handle(ctx, t, w)
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (a *testAgent) handle(ctx context.Context, t testing.TB, w *workv1.ManifestWork) {
	a.received.Add(1)
	if a.silent.Load() {
		return
	}
	works := a.client
	if !w.DeletionTimestamp.IsZero() {
		if len(w.Finalizers) > 0 {
			// As the work agent does once the manifests are gone; the client then reports Deleted.
			_, _ = works.Patch(ctx, w.Name, kubetypes.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		}
		return
	}
	cond := meta.FindStatusCondition(w.Status.Conditions, workv1.WorkApplied)
	if cond != nil && cond.ObservedGeneration == w.Generation && cond.Message == manifestNames(w) {
		return
	}
	a.report(ctx, t, w, manifestNames(w))
}

// report publishes an Applied status for the work with the given message.
func (a *testAgent) report(ctx context.Context, t testing.TB, w *workv1.ManifestWork, message string) {
	status := workv1.ManifestWorkStatus{Conditions: []metav1.Condition{{Type: workv1.WorkApplied, Status: metav1.ConditionTrue,
		Reason: "Applied", Message: message, ObservedGeneration: w.Generation, LastTransitionTime: metav1.Now()}}}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		t.Error(err)
		return
	}
	if _, err := a.client.Patch(ctx, w.Name, kubetypes.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Logf("agent %s: report status of %s: %v", a.cluster, w.Name, err)
	}
}

// work returns the agent client's copy of a work, or nil. It reads the client's store, not the informer:
// sdk-go's agent store replaces a work whose name changed without a watch event.
func (a *testAgent) work(name string) *workv1.ManifestWork {
	w, err := a.client.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return w
}

// manifestNames is the names of a work's ConfigMaps, joined: what the test agent reports.
func manifestNames(w *workv1.ManifestWork) string {
	var names []string
	for _, m := range w.Spec.Workload.Manifests {
		var obj struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		_ = json.Unmarshal(m.Raw, &obj)
		names = append(names, obj.Metadata.Name)
	}
	return strings.Join(names, ",")
}

// newWork is a ManifestWork of ConfigMaps with the given names.
func newWork(cluster, name string, configMaps ...string) *workv1.ManifestWork {
	w := &workv1.ManifestWork{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: cluster,
		Labels: map[string]string{"app": name}, Annotations: map[string]string{"note": "test"}}}
	w.Spec.Workload.Manifests = manifests(configMaps...)
	return w
}

func manifests(configMaps ...string) []workv1.Manifest {
	var out []workv1.Manifest
	for _, cm := range configMaps {
		raw := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":"default"},"data":{"k":"v"}}`, cm)
		out = append(out, workv1.Manifest{RawExtension: runtime.RawExtension{Raw: []byte(raw)}})
	}
	return out
}

// manifestsPatch is a merge patch that replaces a work's manifests.
func manifestsPatch(t testing.TB, configMaps ...string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"spec": map[string]any{"workload": map[string]any{"manifests": manifests(configMaps...)}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
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
