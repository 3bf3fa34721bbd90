package workclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubetypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	workv1 "open-cluster-management.io/api/work/v1"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/common"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work/payload"
	sourceclient "open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work/source/client"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/clients/work/source/codec"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/clients"
	grpcoptions "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc"
	grpcv2 "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/v2/grpc"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/utils"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/argocd-pull/argocd-pull/internal/server/restapi"
)

// GRPCOptions configure the grpc transport.
type GRPCOptions struct {
	// ConfigFile is an sdk-go gRPC client config (url, caFile, clientCertFile, clientKeyFile, token or tokenFile)
	// for the server's source endpoint.
	ConfigFile string
	// RESTURL is the server's REST API, where the works are listed after a start. The CA, client certificate
	// and token of ConfigFile are used for it too.
	RESTURL string
	// SourceID identifies this controller as a CloudEvents source.
	SourceID string
	// PublishQPS and PublishBurst bound the spec events sent to the server.
	PublishQPS   float32
	PublishBurst int
	// PageSize is the page size of the list after a start.
	PageSize int
	// Publishers is the number of connections spec events are published over. sdk-go's gRPC transport sends one
	// event at a time per connection (it holds a lock for the whole Publish call), so one connection caps the
	// publish rate at one round trip per event.
	Publishers int
	// ResyncPeriod is how long a work's deletion may stay unconfirmed, or a created work without a status from
	// its agent, before its cluster's statuses are resynced (default one minute); a cluster that stays so is
	// resynced again after twice as long each time (at most 16 periods).
	ResyncPeriod time.Duration
}

// GRPC is the Maestro-mode transport: works are CloudEvents published through the unmodified sdk-go source
// client to a Maestro-compatible server, which keeps them in its database; nothing is written to the hub.
// At a start the works are listed from the server's REST API, page by page, as soon as the server answers;
// after every (re)connection the client resyncs statuses by hash, cluster by cluster, so only what changed is
// sent again.
type GRPC struct {
	store *workStore
	// events subscribes to the statuses and answers resyncs; publishers send the spec events, each work always
	// over the same one so that its events stay in order.
	events     generic.CloudEventsClient[*workv1.ManifestWork]
	publishers []generic.CloudEventsClient[*workv1.ManifestWork]
	sourceID   string
	lister     *restLister

	mu sync.Mutex
	// notListed is why the works are not listed yet; nil once they are.
	notListed error
	// creating counts the works being created per namespace: published, not stored yet.
	creating map[string]int
}

var _ Client = (*GRPC)(nil)

// listBackoff spaces the attempts to list the works while the server does not answer: soon after it is back,
// without hammering it while it is away.
var listBackoff = wait.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: math.MaxInt32, Cap: 4 * time.Second}

// NewGRPC starts the transport. The server need not be up: the works are listed as soon as it answers, and
// until then the transport's informer is not synced and Ready says what it waits for. Only a configuration
// that cannot work is an error.
func NewGRPC(ctx context.Context, o GRPCOptions) (*GRPC, error) {
	cfg, err := grpcoptions.LoadConfig(o.ConfigFile)
	if err != nil {
		return nil, fmt.Errorf("load grpc config %s: %w", o.ConfigFile, err)
	}
	lister, err := newRESTLister(cfg, o)
	if err != nil {
		return nil, err
	}
	g := &GRPC{store: newWorkStore(), sourceID: o.SourceID, lister: lister, notListed: errors.New("listing"), creating: map[string]int{}}
	publishers := max(o.Publishers, 1)
	limit := utils.EventRateLimit{QPS: o.PublishQPS / float32(publishers), Burst: max(o.PublishBurst/publishers, 1)}
	for i := 0; i <= publishers; i++ {
		// sdk-go connects lazily and reconnects by itself: a server that is down is not an error here.
		c, err := newSourceClient(ctx, o, cfg, g.store, limit)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			g.events = c
		} else {
			g.publishers = append(g.publishers, c)
		}
	}
	go g.run(ctx)
	period := o.ResyncPeriod
	if period <= 0 {
		period = time.Minute
	}
	go g.resyncStuck(ctx, period)
	return g, nil
}

// run lists the works, then subscribes to their statuses and resyncs them after every (re)subscription.
func (g *GRPC) run(ctx context.Context) {
	if err := g.listWorks(ctx); err != nil {
		return
	}
	g.events.Subscribe(ctx, g.store.HandleReceivedResource)
	g.resyncOnSubscribe(ctx, g.events)
}

// listWorks lists the works from the server into the store, again and again until it answers or ctx ends, and
// marks the store synced. It logs what it waits for when that changes, not at every attempt.
func (g *GRPC) listWorks(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("source", g.sourceID, "server", g.lister.client.URL())
	backoff := listBackoff
	start := time.Now()
	logged := ""
	for {
		listed, notStored := 0, 0
		var storeErr error
		err := g.lister.each(ctx, func(w *workv1.ManifestWork, statusHash string) error {
			listed++
			if err := g.store.listed(w, statusHash); err != nil {
				notStored++
				storeErr = err
			}
			return nil
		})
		if err == nil {
			g.store.listDone()
			g.setNotListed(nil)
			logger.Info("Listed works from the server", "works", listed, "after", time.Since(start).Round(time.Millisecond))
			if notStored > 0 {
				logger.Error(storeErr, "Could not store some of the works listed from the server", "works", notStored)
			}
			return nil
		}
		g.store.listFailed()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		g.setNotListed(err)
		if err.Error() != logged {
			logged = err.Error()
			logger.Info("Waiting for the server to list the works; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff.Step()):
		}
	}
}

func (g *GRPC) setNotListed(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.notListed = err
}

// Ready reports whether the transport can deliver: the works are listed and the server is ready.
func (g *GRPC) Ready(ctx context.Context) error {
	g.mu.Lock()
	notListed := g.notListed
	g.mu.Unlock()
	if notListed != nil {
		return fmt.Errorf("the works are not listed from the server yet: %w", notListed)
	}
	return g.lister.ready(ctx)
}

// WaitForSync waits until the works are listed, or ctx ends.
func (g *GRPC) WaitForSync(ctx context.Context) error {
	if !toolscache.WaitForCacheSync(ctx.Done(), g.store.HasSynced) {
		return fmt.Errorf("wait for the works of source %s to be listed: %w", g.sourceID, context.Cause(ctx))
	}
	return nil
}

// newSourceClient connects an unmodified sdk-go CloudEvents source client over a connection of its own, with
// the default keepalive unless the config sets one.
func newSourceClient(ctx context.Context, o GRPCOptions, cfg *grpcoptions.GRPCConfig, s *workStore, limit utils.EventRateLimit) (generic.CloudEventsClient[*workv1.ManifestWork], error) {
	grpcOpts, err := grpcoptions.BuildGRPCOptionsFromFlags(o.ConfigFile)
	if err != nil {
		return nil, fmt.Errorf("build grpc options from %s: %w", o.ConfigFile, err)
	}
	DefaultKeepAlive(grpcOpts, cfg)
	sourceOpts := grpcv2.NewSourceOptions(grpcOpts, o.SourceID, payload.ManifestBundleEventDataType)
	sourceOpts.CloudEventsTransport = newGuardedTransport(sourceOpts.CloudEventsTransport)
	sourceOpts.EventRateLimit = limit
	c, err := clients.NewCloudEventSourceClient[*workv1.ManifestWork](ctx, sourceOpts,
		sourceLister{s}, s.statusHash, codec.NewManifestBundleCodec())
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", grpcOpts.Dialer.URL, err)
	}
	return c, nil
}

func newRESTLister(cfg *grpcoptions.GRPCConfig, o GRPCOptions) (*restLister, error) {
	// The grpc config's CA, client certificate and token serve the REST API too. The REST API is used only
	// for the list at a start, so they are read once.
	c, err := restapi.New(restapi.Config{
		URL: o.RESTURL, Token: cfg.Token, TokenFile: cfg.TokenFile, Timeout: 2 * time.Minute,
		TLS: restapi.TLS{CAData: cfg.CAData, CertData: cfg.ClientCertData, KeyData: cfg.ClientKeyData},
	})
	if err != nil {
		return nil, fmt.Errorf("the grpc config's TLS or token for the REST API: %w", err)
	}
	return &restLister{client: c, source: o.SourceID, pageSize: o.PageSize}, nil
}

// resyncOnSubscribe asks the server, after every (re)subscription, for the statuses that changed: one resync
// request per cluster, so that no request carries the hashes of the whole fleet.
func (g *GRPC) resyncOnSubscribe(ctx context.Context, events generic.CloudEventsClient[*workv1.ManifestWork]) {
	logger := klog.FromContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-events.SubscribedChan():
		}
		for _, cluster := range g.resyncNamespaces() {
			if err := events.Resync(forStatusResync(ctx), cluster); err != nil {
				logger.Error(err, "Resync statuses", "cluster", cluster)
			}
		}
	}
}

// resyncNamespaces returns the clusters whose statuses a new subscription resyncs: the ones with works, and the
// ones where a work is being created. The agent's status for a work published before the subscription, and
// stored only after it, comes back only through a resync of its cluster.
func (g *GRPC) resyncNamespaces() []string {
	g.mu.Lock()
	creating := maps.Clone(g.creating)
	g.mu.Unlock()
	namespaces := g.store.namespaces()
	for _, ns := range namespaces {
		delete(creating, ns)
	}
	for ns := range creating {
		namespaces = append(namespaces, ns)
	}
	return namespaces
}

// created counts a work being created in a namespace until the returned func is called.
func (g *GRPC) created(namespace string) (done func()) {
	g.mu.Lock()
	g.creating[namespace]++
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.creating[namespace]--; g.creating[namespace] == 0 {
			delete(g.creating, namespace)
		}
	}
}

// resyncStuck asks, every period, for the statuses of the clusters where a work has been deleting, or a work
// created here has been without any status from its agent, for longer than a period. Should the final status
// of a deletion ever be lost, the server answers the resync with the removal of the works it no longer has;
// should the first status of a work be lost (it reached the server while the subscription was down, or the
// publish of the work lost its answer and was made again after the subscription's resync), the server answers
// with the status it holds. A cluster whose agent is away stays stuck: it is asked again after twice as long
// each time (stuckBackoff), so that it costs one request per 16 periods at most.
func (g *GRPC) resyncStuck(ctx context.Context, period time.Duration) {
	logger := klog.FromContext(ctx)
	tick := time.NewTicker(period)
	defer tick.Stop()
	backoff := newStuckBackoff(16)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		stuck := g.store.stuckClusters(time.Now().Add(-period))
		due := backoff.due(slices.Sorted(maps.Keys(stuck)))
		if len(due) > 0 {
			var total stuckWorks
			for _, cluster := range due {
				total.deleting += stuck[cluster].deleting
				total.unreported += stuck[cluster].unreported
			}
			logger.Info("Resyncing the clusters with works unconfirmed for a while", "clusters", len(due),
				"first", due[0], "deleting", total.deleting, "withoutStatus", total.unreported)
		}
		for _, cluster := range due {
			n := stuck[cluster]
			logger.V(2).Info("Resyncing a cluster", "cluster", cluster, "deleting", n.deleting, "withoutStatus", n.unreported)
			if err := g.events.Resync(forStatusResync(ctx), cluster); err != nil {
				logger.Error(err, "Resync statuses", "cluster", cluster)
				backoff.retry(cluster)
			}
		}
	}
}

// stuckBackoff spaces the resyncs of a cluster that stays stuck: due at the first tick it is stuck, then after
// 2, 4, … ticks, up to max; a cluster no longer stuck starts again from one tick.
type stuckBackoff struct {
	max      int
	clusters map[string]stuckWait
}

// stuckWait is a stuck cluster's ticks to wait until its next resync, and the interval it waited last.
type stuckWait struct{ wait, interval int }

func newStuckBackoff(maxTicks int) *stuckBackoff {
	return &stuckBackoff{max: maxTicks, clusters: map[string]stuckWait{}}
}

// due takes the clusters stuck at this tick and returns those to resync now.
func (b *stuckBackoff) due(stuck []string) []string {
	next := make(map[string]stuckWait, len(stuck))
	var out []string
	for _, c := range stuck {
		w, ok := b.clusters[c]
		switch {
		case !ok:
			w = stuckWait{wait: 1, interval: 1}
			out = append(out, c)
		case w.wait > 1:
			w.wait--
		default:
			w.interval = min(2*w.interval, b.max)
			w.wait = w.interval
			out = append(out, c)
		}
		next[c] = w
	}
	b.clusters = next
	return out
}

// retry makes a cluster whose resync failed due again at the next tick.
func (b *stuckBackoff) retry(cluster string) {
	if w, ok := b.clusters[cluster]; ok {
		w.wait = 1
		b.clusters[cluster] = w
	}
}

// client returns a source client for one work. The sdk-go client holds the namespace in a field, so each call
// gets its own; they share the store and publish over the work's connection.
func (g *GRPC) client(namespace, name string) *sourceclient.ManifestWorkSourceClient {
	h := fnv.New32a()
	_, _ = h.Write([]byte(namespace + "/" + name))
	c := sourceclient.NewManifestWorkSourceClient(g.sourceID, g.store, g.publishers[h.Sum32()%uint32(len(g.publishers))])
	c.SetNamespace(namespace)
	return c
}

// Apply publishes a new work, or the work's new labels, annotations and spec with its version raised by one.
func (g *GRPC) Apply(ctx context.Context, work *workv1.ManifestWork) error {
	last, ok, _ := g.store.Get(ctx, work.Namespace, work.Name)
	c := g.client(work.Namespace, work.Name)
	var err error
	switch {
	case !ok:
		// The source client publishes a deep copy of what it is given and changes nothing of it: a copy of
		// the work's top level is enough to set the generation without changing the caller's work.
		w := *work
		w.Generation = 1
		done := g.created(work.Namespace)
		_, err = c.Create(ctx, &w, metav1.CreateOptions{})
		done()
	case !last.DeletionTimestamp.IsZero():
		return fmt.Errorf("work %s/%s is being deleted; it is published again once the agent removed it", work.Namespace, work.Name)
	default:
		var patch []byte
		patch, err = json.Marshal([]map[string]any{
			{"op": "add", "path": "/metadata/labels", "value": work.Labels},
			{"op": "add", "path": "/metadata/annotations", "value": keepSequence(work.Annotations, last.Annotations)},
			{"op": "add", "path": "/metadata/generation", "value": last.Generation + 1},
			{"op": "add", "path": "/spec", "value": work.Spec},
		})
		if err == nil {
			_, err = c.Patch(ctx, work.Name, kubetypes.JSONPatchType, patch, metav1.PatchOptions{})
		}
	}
	if err != nil {
		return publishError(work, err)
	}
	return nil
}

// keepSequence carries the stored status sequence ID over to the new annotations.
func keepSequence(annotations, last map[string]string) map[string]string {
	out := make(map[string]string, len(annotations)+1)
	for k, v := range annotations {
		out[k] = v
	}
	if seq, ok := last[common.CloudEventsSequenceIDAnnotationKey]; ok {
		out[common.CloudEventsSequenceIDAnnotationKey] = seq
	}
	return out
}

// publishError names the work and recognises the server's "unknown consumer" answer.
func publishError(work *workv1.ManifestWork, err error) error {
	msg := err.Error()
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Details != nil {
		for _, c := range status.Status().Details.Causes {
			msg += ": " + c.Message
		}
	}
	if strings.Contains(msg, "code = NotFound") && strings.Contains(msg, "consumer") {
		return UnknownClusterError(work.Namespace, err)
	}
	if unreachable(msg) {
		return fmt.Errorf("publish work %s/%s: %w: %w", work.Namespace, work.Name, ErrUnavailable, err)
	}
	return fmt.Errorf("publish work %s/%s: %w", work.Namespace, work.Name, err)
}

// unreachable reports whether a publish failed because the connection to the server is down: sdk-go's client
// is not connected (yet, or again), or gRPC found the connection gone or closing. sdk-go hands the cause on as
// the message of a generic publish error only.
func unreachable(msg string) bool {
	for _, s := range []string{"the cloudevents client is not ready", "code = Unavailable", "the client connection is closing",
		"transport not connected"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// Delete publishes the work's deletion; it stays, marked, until the agent reports it gone.
func (g *GRPC) Delete(ctx context.Context, namespace, name string) error {
	if err := g.client(namespace, name).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		if unreachable(err.Error()) {
			return fmt.Errorf("delete work %s/%s: %w: %w", namespace, name, ErrUnavailable, err)
		}
		return fmt.Errorf("delete work %s/%s: %w", namespace, name, err)
	}
	return nil
}

// Get returns a copy of a stored work, with its status.
func (g *GRPC) Get(_ context.Context, namespace, name string) (*workv1.ManifestWork, error) {
	w, ok, _ := g.store.Get(context.Background(), namespace, name)
	if !ok {
		return nil, apierrors.NewNotFound(common.ManifestWorkGR, name)
	}
	return w, nil
}

// ListForApplication returns copies of the works of a hub Application, without their status.
func (g *GRPC) ListForApplication(_ context.Context, appNamespace, appName string) ([]*workv1.ManifestWork, error) {
	return g.store.forApplication(appNamespace + "/" + appName), nil
}

// Informer returns the store, which delivers the works' events.
func (g *GRPC) Informer() cache.Informer { return g.store }
