// Package sim is `argocd-pull sim`: a fleet of simulated managed clusters in one process, for scale and fault
// tests. Each simulated cluster is a real protocol agent — an unmodified sdk-go agent client on its own gRPC
// connection to the server (transport grpc), or one shared watcher of ManifestWorks on the hub writing work
// status as the OCM work agent does (transport kube) — with an in-memory applier and a simulated local Argo CD
// instead of a kube-apiserver and Argo CD. The work status it reports (conditions, feedback values, raw
// limits) is the OCM work agent's, read by the agent's own feedback reader. It is a simulator and says so: it
// replaces kube-apiservers and Argo CD, never the hub side (controller, server, database), which run for real.
package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	grpcoptions "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc"

	"github.com/argocd-pull/argocd-pull/internal/workclient"
)

// DefaultWorkers is how many works a fleet processes at once unless told otherwise. Sending a status waits for
// the server (or the hub apiserver) to take it, so more works are in flight than there are CPUs, as in a real
// fleet where every agent has its own.
const DefaultWorkers = 32

// Config configures a Fleet. Options builds one from the command line; a Go program can fill it in directly.
type Config struct {
	// Transport is workclient.TransportGRPC or workclient.TransportKube.
	Transport string
	// GRPC is the agent connection of the grpc transport: the URL of the server's agent endpoint, and its TLS,
	// token and keepalive settings. Each simulated cluster gets a dialer and a connection of its own from it.
	GRPC *grpcoptions.GRPCOptions
	// ClusterTokens gives each simulated cluster the bearer token of its own agent, as the server admits an
	// agent for its own cluster only; a cluster without one uses GRPC's token or certificate.
	ClusterTokens map[string]string
	// Hub is the hub apiserver of the kube transport.
	Hub *rest.Config
	// Clusters names the simulated clusters (see ClusterNames).
	Clusters []string
	// Argo is how the simulated Argo CD behaves.
	Argo ArgoConfig
	// Churn is the rate of random status changes across the fleet, per second (0: none). SetChurn changes it.
	Churn float64
	// MaxJSONRawLength is the largest raw-JSON feedback value; 0 means the transport's limit.
	MaxJSONRawLength int32
	// Workers bounds how many works are processed at once, across the fleet (0: DefaultWorkers).
	Workers int
	// ConnectParallelism bounds how many clusters connect at once when the fleet starts (grpc).
	ConnectParallelism int
	// Seed seeds the choice of the Applications that churn changes.
	Seed uint64
	// Console opens each simulated cluster's console stream (grpc), answered from the simulated Argo CD.
	Console bool
	// Hooks are called as things happen.
	Hooks Hooks
}

// Event is something that happened to one work, and its Application, on a simulated cluster.
type Event struct {
	Cluster string
	Work    string
	// HubNamespace and HubName name the work's hub Application (from its annotations).
	HubNamespace string
	HubName      string
	// Generation is the work's generation.
	Generation int64
	// Sync and Health are the Application's statuses in the status that was sent (empty without one).
	Sync   string
	Health string
	// At is when it happened: for a status, when the agent client had sent it.
	At time.Time
	// ChangedAt, for a status, is when the Application's status changed on the simulated cluster (a sync
	// completing, churn, Flip): the start of its way to the hub.
	ChangedAt time.Time
}

// Hooks are called synchronously by the fleet's workers; they must return quickly and must not wait on the
// fleet (no Flip from a hook).
type Hooks struct {
	// Applied: the work's generation was applied and its Applied status sent.
	Applied func(Event)
	// StatusSent: a status with feedback (Available conditions and values) was sent.
	StatusSent func(Event)
	// Synced: the Application was reported Synced and Healthy, where the previous report was not.
	Synced func(Event)
	// Deleted: the work's deletion completed on the cluster (its Application is gone).
	Deleted func(Event)
}

// Stats are the fleet's counts. The totals only grow; the others are current.
type Stats struct {
	// Clusters simulated, and how many of them are connected: over gRPC, whose agent client started (it
	// reconnects by itself after that); on kube, all once the hub's works are listed.
	Clusters  int
	Connected int
	// Works held by the simulated clusters, their Applications, and how many of those were last reported
	// Synced and Healthy.
	Works         int64
	Applications  int64
	SyncedHealthy int64
	// Applied counts work generations applied (an Applied status sent for each).
	Applied uint64
	// StatusUpdates counts every status sent, Applied ones included.
	StatusUpdates uint64
	// Deletions counts works whose deletion completed.
	Deletions uint64
	// ChurnChanges counts the random status changes made.
	ChurnChanges uint64
	// Errors counts failed attempts (they are retried).
	Errors uint64
}

// AppState is a simulated Application as its simulated Argo CD holds it.
type AppState struct {
	Name, Namespace string
	Sync, Health    string
	Revision        string
	// OperationPhase is the phase of the last operation ("" without one).
	OperationPhase string
	// Invalid reports a repoURL that --invalid-repo matches.
	Invalid bool
	// Status is the Application's .status as the simulated Argo CD writes it.
	Status map[string]any
}

// ErrNotFound is returned for a cluster or work the fleet does not hold.
var ErrNotFound = errors.New("not found")

// ErrNotSettled is returned by Flip for an Application that is syncing or cannot be compared.
var ErrNotSettled = errors.New("the application is syncing or has a comparison error")

// errDeleted is what a Flip waiting for a work that gets deleted receives.
var errDeleted = errors.New("the work was deleted before its status was sent")

// key is one work on one simulated cluster: the unit of the work queue.
type key struct {
	cluster int32
	work    string
}

// Fleet is a running set of simulated clusters.
type Fleet struct {
	cfg      Config
	clusters []*cluster
	byName   map[string]int32
	tr       transport
	queue    workqueue.TypedRateLimitingInterface[key]
	reader   *feedbackReader
	registry *prometheus.Registry
	logger   klog.Logger

	churn        atomic.Uint64 // float64 bits
	churnChanged chan struct{}

	applied, statusUpdates, deletions, churnChanges, errors atomic.Uint64
	works, apps, syncedHealthy                              atomic.Int64
	errorsBy                                                *prometheus.CounterVec

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// cluster is one simulated managed cluster: its works and their Applications.
type cluster struct {
	name  string
	index int32

	mu      sync.Mutex
	works   map[string]*simWork
	list    []*simWork // the same works, for random picks
	waiters map[string][]waiter
}

// simWork is one work a simulated cluster applied, with the Application it carries.
type simWork struct {
	name         string
	gen          int64
	hubNamespace string
	hubName      string
	index        int32 // in cluster.list
	hasApp       bool
	// reported: the last status sent showed the Application Synced and Healthy.
	reported bool
	// seq counts the on-demand changes (Flip) so that a waiter is told of the status that carries its change.
	seq uint32
	// sentGen and sentChange are the work generation and the Application's changedAt of the last status sent
	// (0: none since the last Applied report): a work event that carries nothing newer needs no new read of
	// the Application (the agent would read it and find nothing to send).
	sentGen    int64
	sentChange int64
	app        app
}

type waiter struct {
	seq uint32
	ch  chan Event
}

// ClusterNames returns n cluster names: prefix followed by start, start+1, ….
func ClusterNames(prefix string, start, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s%d", prefix, start+i)
	}
	return names
}

// NewFleet returns a fleet for the configuration; Start runs it.
func NewFleet(cfg Config) (*Fleet, error) {
	if len(cfg.Clusters) == 0 {
		return nil, errors.New("no clusters to simulate")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.ConnectParallelism <= 0 {
		cfg.ConnectParallelism = 32
	}
	if cfg.Argo.ResourcesPerApp < 0 {
		return nil, errors.New("resources per application must not be negative")
	}
	if err := workclient.EnableRawFeedback(); err != nil {
		return nil, err
	}
	f := &Fleet{
		cfg:          cfg,
		byName:       make(map[string]int32, len(cfg.Clusters)),
		churnChanged: make(chan struct{}, 1),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[key](50*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[key]{}),
	}
	for i, name := range cfg.Clusters {
		if _, dup := f.byName[name]; dup {
			return nil, fmt.Errorf("cluster %s is listed twice", name)
		}
		index := int32(i) //nolint:gosec // a fleet has far fewer than 2^31 clusters
		f.byName[name] = index
		f.clusters = append(f.clusters, &cluster{name: name, index: index, works: map[string]*simWork{}, waiters: map[string][]waiter{}})
	}
	switch cfg.Transport {
	case workclient.TransportGRPC:
		if cfg.GRPC == nil || cfg.GRPC.Dialer == nil || cfg.GRPC.Dialer.URL == "" {
			return nil, errors.New("the grpc transport needs the server's agent address")
		}
		f.tr = newGRPCTransport(cfg.GRPC, cfg.ConnectParallelism)
	case workclient.TransportKube:
		if cfg.Hub == nil {
			return nil, errors.New("the kube transport needs the hub's rest config")
		}
		f.tr = newKubeTransport(cfg.Hub)
	default:
		return nil, fmt.Errorf("unknown transport %q (want %s or %s)", cfg.Transport, workclient.TransportGRPC, workclient.TransportKube)
	}
	if f.cfg.MaxJSONRawLength == 0 {
		f.cfg.MaxJSONRawLength = workclient.MaxJSONRawLength(cfg.Transport)
	}
	f.reader = newFeedbackReader(f.cfg.MaxJSONRawLength)
	f.SetChurn(cfg.Churn)
	f.registry = f.newRegistry()
	return f, nil
}

// Start connects the simulated clusters and runs them until ctx ends or Stop is called. It returns once every
// cluster is connected (grpc) or the hub's works are listed (kube).
func (f *Fleet) Start(ctx context.Context) error {
	f.logger = klog.FromContext(ctx).WithValues("transport", f.cfg.Transport)
	ctx, f.cancel = context.WithCancel(klog.NewContext(ctx, f.logger))
	for range f.cfg.Workers {
		f.wg.Go(func() { f.worker(ctx) })
	}
	f.wg.Go(func() { f.churnLoop(ctx) })
	f.wg.Go(func() {
		<-ctx.Done()
		f.queue.ShutDown()
	})
	start := time.Now()
	if err := f.tr.start(ctx, f); err != nil {
		f.Stop()
		return err
	}
	f.logger.Info("Simulated clusters connected", "clusters", len(f.clusters), "duration", time.Since(start).Round(time.Millisecond))
	return nil
}

// Stop stops the fleet and waits for its goroutines.
func (f *Fleet) Stop() {
	if f.cancel != nil {
		f.cancel()
	}
	f.queue.ShutDown()
	f.tr.stop()
	f.wg.Wait()
}

// Clusters returns the names of the simulated clusters.
func (f *Fleet) Clusters() []string { return slices.Clone(f.cfg.Clusters) }

// Registry returns the fleet's Prometheus metrics.
func (f *Fleet) Registry() *prometheus.Registry { return f.registry }

// Stats returns the fleet's counts.
func (f *Fleet) Stats() Stats {
	return Stats{
		Clusters:      len(f.clusters),
		Connected:     f.tr.connected(),
		Works:         f.works.Load(),
		Applications:  f.apps.Load(),
		SyncedHealthy: f.syncedHealthy.Load(),
		Applied:       f.applied.Load(),
		StatusUpdates: f.statusUpdates.Load(),
		Deletions:     f.deletions.Load(),
		ChurnChanges:  f.churnChanges.Load(),
		Errors:        f.errors.Load(),
	}
}

// SetChurn sets the rate of random status changes across the fleet, per second (0 turns churn off).
func (f *Fleet) SetChurn(perSecond float64) {
	if perSecond < 0 || math.IsNaN(perSecond) {
		perSecond = 0
	}
	f.churn.Store(math.Float64bits(perSecond))
	select {
	case f.churnChanged <- struct{}{}:
	default:
	}
}

// Application returns the simulated Application of a work.
func (f *Fleet) Application(clusterName, work string) (AppState, bool) {
	c := f.cluster(clusterName)
	if c == nil {
		return AppState{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.works[work]
	if w == nil || !w.hasApp {
		return AppState{}, false
	}
	a := &w.app
	s := AppState{Name: a.name, Namespace: a.namespace, Sync: a.sync.String(), Health: a.health.String(),
		Revision: a.revision, Invalid: a.invalid, Status: f.cfg.Argo.status(a)}
	if a.op != nil {
		s.OperationPhase = a.op.phase
	}
	return s, true
}

// ApplicationView is one simulated Application with its cluster, work and hub Application, without its
// .status: what /applications lists for fault tests, which compare it with the hub.
type ApplicationView struct {
	Cluster        string `json:"cluster"`
	Work           string `json:"work"`
	HubNamespace   string `json:"hubNamespace"`
	HubName        string `json:"hubName"`
	Namespace      string `json:"namespace"`
	Name           string `json:"name"`
	Sync           string `json:"sync"`
	Health         string `json:"health"`
	Revision       string `json:"revision"`
	OperationPhase string `json:"operationPhase,omitempty"`
}

// Applications returns every simulated Application of the fleet, cluster by cluster.
func (f *Fleet) Applications() []ApplicationView {
	var out []ApplicationView
	for _, c := range f.clusters {
		c.mu.Lock()
		for _, w := range c.list {
			if !w.hasApp {
				continue
			}
			a := &w.app
			v := ApplicationView{Cluster: c.name, Work: w.name, HubNamespace: w.hubNamespace, HubName: w.hubName,
				Namespace: a.namespace, Name: a.name, Sync: a.sync.String(), Health: a.health.String(), Revision: a.revision}
			if a.op != nil {
				v.OperationPhase = a.op.phase
			}
			out = append(out, v)
		}
		c.mu.Unlock()
	}
	return out
}

// Works returns the names of the works a simulated cluster holds.
func (f *Fleet) Works(clusterName string) []string {
	c := f.cluster(clusterName)
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, 0, len(c.list))
	for _, w := range c.list {
		names = append(names, w.name)
	}
	slices.Sort(names)
	return names
}

// Flip changes one settled Application's health (Healthy ↔ Degraded) or, with sync, its sync status
// (Synced ↔ OutOfSync), and waits until the agent client has sent the status that carries the change. The
// event's At is when it was sent: the start of the status latency to the hub.
func (f *Fleet) Flip(ctx context.Context, clusterName, work string, sync bool) (Event, error) {
	c := f.cluster(clusterName)
	if c == nil {
		return Event{}, fmt.Errorf("cluster %s: %w", clusterName, ErrNotFound)
	}
	ch := make(chan Event, 1)
	c.mu.Lock()
	w := c.works[work]
	switch {
	case w == nil || !w.hasApp:
		c.mu.Unlock()
		return Event{}, fmt.Errorf("application of work %s/%s: %w", clusterName, work, ErrNotFound)
	case !w.app.settled():
		c.mu.Unlock()
		return Event{}, fmt.Errorf("application of work %s/%s: %w", clusterName, work, ErrNotSettled)
	}
	w.app.flip(sync, time.Now())
	w.seq++
	c.waiters[work] = append(c.waiters[work], waiter{seq: w.seq, ch: ch})
	c.mu.Unlock()
	f.queue.Add(key{cluster: c.index, work: work})
	select {
	case ev := <-ch:
		if ev.At.IsZero() {
			return Event{}, fmt.Errorf("work %s/%s: %w", clusterName, work, errDeleted)
		}
		return ev, nil
	case <-ctx.Done():
		c.mu.Lock()
		c.waiters[work] = slices.DeleteFunc(c.waiters[work], func(w waiter) bool { return w.ch == ch })
		if len(c.waiters[work]) == 0 {
			delete(c.waiters, work)
		}
		c.mu.Unlock()
		return Event{}, ctx.Err()
	}
}

func (f *Fleet) cluster(name string) *cluster {
	i, ok := f.byName[name]
	if !ok {
		return nil
	}
	return f.clusters[i]
}

// enqueue is how the transports report a change of a work.
func (f *Fleet) enqueue(c int32, work string) {
	f.queue.Add(key{cluster: c, work: work})
}

// syncDelay is the configured sync delay with its jitter.
func (f *Fleet) syncDelay() time.Duration {
	d := f.cfg.Argo.SyncDelay
	if j := f.cfg.Argo.SyncJitter; j > 0 && d > 0 {
		d += time.Duration((rand.Float64()*2 - 1) * j * float64(d)) //nolint:gosec // simulation timing
	}
	return max(d, 0)
}

// churnLoop makes the random status changes: rate × elapsed changes per tick, nothing while the rate is 0.
func (f *Fleet) churnLoop(ctx context.Context) {
	rnd := rand.New(rand.NewPCG(f.cfg.Seed, f.cfg.Seed^0x9e3779b97f4a7c15)) //nolint:gosec // simulation choices
	const tick = 20 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	var owed float64
	last := time.Now()
	for {
		rate := math.Float64frombits(f.churn.Load())
		if rate <= 0 {
			owed = 0
			select {
			case <-ctx.Done():
				return
			case <-f.churnChanged:
				last = time.Now()
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-f.churnChanged:
			continue
		case now := <-t.C:
			if rate = math.Float64frombits(f.churn.Load()); rate <= 0 {
				continue
			}
			owed += rate * now.Sub(last).Seconds()
			last = now
			for ; owed >= 1; owed-- {
				f.churnOne(rnd)
			}
		}
	}
}

// churnOne changes the status of a random settled Application.
func (f *Fleet) churnOne(rnd *rand.Rand) {
	for range 8 {
		c := f.clusters[rnd.IntN(len(f.clusters))]
		c.mu.Lock()
		if len(c.list) == 0 {
			c.mu.Unlock()
			continue
		}
		w := c.list[rnd.IntN(len(c.list))]
		if !w.hasApp || !w.app.settled() {
			c.mu.Unlock()
			continue
		}
		w.app.flip(rnd.IntN(2) == 0, time.Now())
		name := w.name
		c.mu.Unlock()
		f.churnChanges.Add(1)
		f.enqueue(c.index, name)
		return
	}
}
