package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	workclientset "open-cluster-management.io/api/client/work/clientset/versioned"
	workv1client "open-cluster-management.io/api/client/work/clientset/versioned/typed/work/v1"
	workinformers "open-cluster-management.io/api/client/work/informers/externalversions"
	workv1 "open-cluster-management.io/api/work/v1"
	clientoptions "open-cluster-management.io/sdk-go/pkg/cloudevents/clients/options"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work"
	agentcodec "open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work/agent/codec"
	workstore "open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work/store"
	grpcoptions "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc"

	"github.com/argocd-pull/argocd-pull/internal/hubmanager"
	"github.com/argocd-pull/argocd-pull/internal/reconnect"
)

// transport is where the simulated clusters get their works from and write their status to.
type transport interface {
	// start connects every cluster and reports each change of a work with f.enqueue.
	start(ctx context.Context, f *Fleet) error
	// get returns a cluster's work from the transport's cache. The object is shared: never modify it.
	get(c *cluster, name string) (*workv1.ManifestWork, bool)
	// client is the cluster's ManifestWork client, for status and finalizer patches.
	client(c *cluster) workv1client.ManifestWorkInterface
	// stored reports whether the client has the work: its patches of a work it does not have fail.
	stored(ctx context.Context, c *cluster, name string) bool
	// takesWorks reports whether the agent marks a work it takes with its finalizer (kube); over gRPC a
	// deletion always comes with the finalizer.
	takesWorks() bool
	// connected counts the connected clusters.
	connected() int
	stop()
}

// grpcTransport runs one unmodified sdk-go agent client per simulated cluster, each on its own connection.
type grpcTransport struct {
	template *grpcoptions.GRPCOptions
	parallel int
	conns    []atomic.Pointer[agentConn] // by cluster index
	up       atomic.Int64
}

// agentConn is a cluster's agent client: a new one replaces it when it is restarted.
type agentConn struct {
	works  workv1client.ManifestWorkInterface
	dialer *grpcoptions.GRPCDialer
	cache  *workCache
}

// workCache holds the works of one cluster as its watch delivered them, as an informer would. sdk-go's agent
// store sends a change to the watch before it stores it, so the store itself can lag behind an event. The
// objects are the store's own, not copies.
type workCache struct {
	mu    sync.RWMutex
	works map[string]*workv1.ManifestWork
}

func (c *workCache) update(ev watch.Event) (string, bool) {
	w, ok := ev.Object.(*workv1.ManifestWork)
	if !ok || ev.Type == watch.Bookmark {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ev.Type == watch.Deleted {
		delete(c.works, w.Name)
	} else {
		c.works[w.Name] = w
	}
	return w.Name, true
}

func newGRPCTransport(template *grpcoptions.GRPCOptions, parallel int) *grpcTransport {
	return &grpcTransport{template: template, parallel: parallel}
}

func (t *grpcTransport) start(ctx context.Context, f *Fleet) error {
	t.conns = make([]atomic.Pointer[agentConn], len(f.clusters))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(t.parallel)
	for _, c := range f.clusters {
		g.Go(func() error { return t.connect(gctx, ctx, f, c) })
	}
	return g.Wait()
}

// connect starts a cluster's agent client, retrying for a while, and reads its work events. Its goroutines
// live with runCtx; connectCtx bounds the attempts.
func (t *grpcTransport) connect(connectCtx, runCtx context.Context, f *Fleet, c *cluster) error {
	var err error
	for attempt := 0; ; attempt++ {
		if err = t.connectOnce(runCtx, f, c); err == nil {
			t.up.Add(1)
			return nil
		}
		if attempt >= 10 {
			return fmt.Errorf("connect simulated cluster %s: %w", c.name, err)
		}
		select {
		case <-connectCtx.Done():
			return connectCtx.Err()
		case <-time.After(time.Duration(attempt+1) * 200 * time.Millisecond):
		}
	}
}

func (t *grpcTransport) connectOnce(ctx context.Context, f *Fleet, c *cluster) error {
	d := t.template.Dialer
	token := d.Token
	if t, ok := f.cfg.ClusterTokens[c.name]; ok {
		token = t
	}
	dialer := &grpcoptions.GRPCDialer{URL: d.URL, KeepAliveOptions: d.KeepAliveOptions, TLSConfig: d.TLSConfig, Token: token}
	opts := &grpcoptions.GRPCOptions{Dialer: dialer, ServerHealthinessTimeout: t.template.ServerHealthinessTimeout}
	clientOpts := clientoptions.NewGenericClientOptions(opts, agentcodec.NewManifestBundleCodec(), c.name+"-work-agent").
		WithClientWatcherStore(workstore.NewAgentInformerWatcherStore()).
		WithClusterName(c.name)
	cctx, cancel := context.WithCancel(ctx)
	// A client that sdk-go left stuck on a closed connection is replaced, as the work agent restarts it.
	cctx = reconnect.OnStuck(cctx, func() {
		klog.FromContext(ctx).Info("Restarting an agent client that was stuck on a closed connection", "cluster", c.name, "stuckFor", reconnect.StuckAfter)
		cancel()
		_ = dialer.Close()
		t.up.Add(-1)
		f.wg.Go(func() {
			if err := t.connect(ctx, ctx, f, c); err != nil && ctx.Err() == nil {
				klog.FromContext(ctx).Error(err, "Restart a stuck agent client", "cluster", c.name)
			}
		})
	})
	holder, err := work.NewAgentClientHolder(cctx, clientOpts)
	if err != nil {
		cancel()
		_ = dialer.Close()
		return err
	}
	works := holder.ManifestWorks(c.name)
	// sdk-go's agent store hands every change to this watch and waits until it is read.
	w, err := works.Watch(cctx, metav1.ListOptions{})
	if err != nil {
		cancel()
		_ = dialer.Close()
		return err
	}
	cache := &workCache{works: map[string]*workv1.ManifestWork{}}
	t.conns[c.index].Store(&agentConn{works: works, dialer: dialer, cache: cache})
	if f.cfg.Console {
		f.wg.Go(func() { f.serveConsole(cctx, c, dialer) })
	}
	f.wg.Go(func() {
		defer cancel()
		defer w.Stop()
		for {
			select {
			case <-cctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				if name, ok := cache.update(ev); ok {
					f.enqueue(c.index, name)
				}
			}
		}
	})
	return nil
}

func (t *grpcTransport) get(c *cluster, name string) (*workv1.ManifestWork, bool) {
	conn := t.conns[c.index].Load()
	if conn == nil {
		return nil, false
	}
	cache := conn.cache
	cache.mu.RLock()
	defer cache.mu.RUnlock()
	w, ok := cache.works[name]
	return w, ok
}

func (t *grpcTransport) client(c *cluster) workv1client.ManifestWorkInterface {
	return t.conns[c.index].Load().works
}

// stored asks sdk-go's agent store, which hands a work to the watch before it stores it.
func (t *grpcTransport) stored(ctx context.Context, c *cluster, name string) bool {
	_, err := t.client(c).Get(ctx, name, metav1.GetOptions{})
	return !apierrors.IsNotFound(err)
}

func (t *grpcTransport) takesWorks() bool { return false }

func (t *grpcTransport) connected() int { return int(t.up.Load()) }

func (t *grpcTransport) stop() {
	for i := range t.conns {
		if conn := t.conns[i].Load(); conn != nil {
			_ = conn.dialer.Close()
		}
	}
}

// kubeTransport is the basic model: each simulated cluster watches the ManifestWorks of its namespace on the hub,
// on a connection of its own, as each cluster's work agent does; one client writes their status for the whole
// fleet, at the fleet's rate limit. (One watch of every work for the whole fleet, as this model had before, is
// one slow consumer of all the works' events: at 15,000 Applications the apiserver closed it as too slow 130
// times in a run, and a relist of all the works stalled the fleet for 100 s.)
type kubeTransport struct {
	config    *rest.Config
	clientset workclientset.Interface
	// informers are by cluster index.
	informers []cache.SharedIndexInformer
	synced    atomic.Bool
	clusters  int
	cancel    context.CancelFunc
	done      sync.WaitGroup
}

func newKubeTransport(cfg *rest.Config) *kubeTransport {
	return &kubeTransport{config: cfg}
}

func (t *kubeTransport) start(ctx context.Context, f *Fleet) error {
	cs, err := workclientset.NewForConfig(t.config)
	if err != nil {
		return fmt.Errorf("hub work client: %w", err)
	}
	t.clientset = cs
	t.clusters = len(f.clusters)
	ictx, cancel := context.WithCancel(ctx)
	t.cancel = cancel
	t.informers = make([]cache.SharedIndexInformer, len(f.clusters))
	for _, c := range f.clusters {
		informer, err := t.watch(f, c)
		if err != nil {
			return err
		}
		t.informers[c.index] = informer
		t.done.Go(func() { informer.Run(ictx.Done()) })
	}
	for _, informer := range t.informers {
		if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
			return errors.New("the hub's manifestworks did not sync")
		}
	}
	t.synced.Store(true)
	return nil
}

// watch returns the informer of a cluster's works, on a connection of its own, as its work agent has.
func (t *kubeTransport) watch(f *Fleet, c *cluster) (cache.SharedIndexInformer, error) {
	cfg := hubmanager.OwnConnection(t.config)
	// The watch's own list and watch requests; the fleet's rate limit is for its writes.
	cfg.QPS, cfg.Burst = agentQPS, agentBurst
	cs, err := workclientset.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("hub work client of cluster %s: %w", c.name, err)
	}
	informer := workinformers.NewSharedInformerFactoryWithOptions(cs, 0, workinformers.WithNamespace(c.name)).
		Work().V1().ManifestWorks().Informer()
	// Only what the agent reads is kept.
	if err := informer.SetTransform(func(obj any) (any, error) {
		if w, ok := obj.(*workv1.ManifestWork); ok {
			w.ManagedFields = nil
		}
		return obj, nil
	}); err != nil {
		return nil, fmt.Errorf("set informer transform: %w", err)
	}
	changed := func(obj any) {
		k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if err != nil {
			return
		}
		if _, name, found := strings.Cut(k, "/"); found {
			f.enqueue(c.index, name)
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    changed,
		UpdateFunc: func(_, obj any) { changed(obj) },
		DeleteFunc: changed,
	}); err != nil {
		return nil, fmt.Errorf("watch manifestworks of cluster %s: %w", c.name, err)
	}
	return informer, nil
}

// agentQPS and agentBurst are the rate limit of a simulated cluster's watch of its works: the work agent's
// defaults for its hub client (--hub-kube-api-qps, --hub-kube-api-burst).
const agentQPS, agentBurst = 50, 100

// get reads the cluster's informer, which is set before it runs: before its first event.
func (t *kubeTransport) get(c *cluster, name string) (*workv1.ManifestWork, bool) {
	obj, ok, err := t.informers[c.index].GetIndexer().GetByKey(c.name + "/" + name)
	if err != nil || !ok {
		return nil, false
	}
	w, ok := obj.(*workv1.ManifestWork)
	return w, ok
}

func (t *kubeTransport) client(c *cluster) workv1client.ManifestWorkInterface {
	return t.clientset.WorkV1().ManifestWorks(c.name)
}

// stored is always true: the informer stores a work before it reports it.
func (t *kubeTransport) stored(context.Context, *cluster, string) bool { return true }

func (t *kubeTransport) takesWorks() bool { return true }

func (t *kubeTransport) connected() int {
	if t.synced.Load() {
		return t.clusters
	}
	return 0
}

func (t *kubeTransport) stop() {
	if t.cancel != nil {
		t.cancel()
	}
	t.done.Wait()
}
