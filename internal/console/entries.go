package console

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"k8s.io/utils/lru"

	"github.com/argocd-pull/argocd-pull/internal/argocd"
	"github.com/argocd-pull/argocd-pull/internal/consoleapi"
)

// Console answers argocd-server's requests about pulled Applications from the clusters that run them.
type Console struct {
	// Hub sends requests to the agents.
	Hub *Hub
	// Targets finds where a hub Application runs.
	Targets Targets
	// ArgoCDNamespace is the namespace argocd-server runs in: an Application there has its bare name as its
	// instance name in cache keys.
	ArgoCDNamespace string
	// HoldFor is how long an answer is held for the next request of the same entry.
	HoldFor time.Duration

	heldMu sync.Mutex
	held   *lru.Cache
}

// heldAnswers is how many cache entries are held at most (each is a gzip-compressed tree or managed resources).
const heldAnswers = 1024

type heldAnswer struct {
	value []byte
	found bool
	at    time.Time
}

// errMaxEntry is an entry larger than the console passes.
var errMaxEntry = errors.New("cache entry larger than 64 MiB")

// Entry is argocd-server's GET of a cache key. handled is false for a key the console does not answer (an
// Application the hub's Argo CD runs, another key): the hub's redis answers it. Otherwise value is the entry in
// the key's encoding (gzip for a .gz key), or found is false for an entry the cluster has not computed.
func (c *Console) Entry(ctx context.Context, key string) (value []byte, found, handled bool, err error) {
	k, ok := argocd.ParseCacheKey(key)
	if !ok {
		return nil, false, false, nil
	}
	cluster, req, pulled, err := c.resolve(ctx, k)
	if err != nil || !pulled {
		return nil, false, pulled, err
	}
	if k.Entry == argocd.CacheEntryClusterInfo && !c.Hub.Connected(ctx, cluster) {
		// The cluster list shows an unknown state rather than an error for a cluster whose agent is away.
		return nil, false, true, nil
	}
	plain := k
	plain.Gzip = false
	gz, found, err := c.get(ctx, cluster, plain.String(), req)
	if err != nil || !found {
		return nil, false, true, err
	}
	if k.Gzip {
		return gz, true, true, nil
	}
	value, err = gunzip(gz)
	return value, err == nil, true, err
}

// resolve finds the cluster of a hub cache key and the request that reads the entry there; pulled is false
// for a key of an Application (or cluster) that the hub's own Argo CD serves.
func (c *Console) resolve(ctx context.Context, k argocd.CacheKey) (string, consoleapi.CacheRequest, bool, error) {
	if k.Entry == argocd.CacheEntryClusterInfo {
		cluster, ok := argocd.ClusterOfServerURL(k.Server)
		return cluster, consoleapi.CacheRequest{Op: consoleapi.CacheGet, Entry: k.Entry}, ok, nil
	}
	t, ok, err := c.target(ctx, k.Instance)
	if err != nil || !ok {
		return "", consoleapi.CacheRequest{}, ok, err
	}
	return t.Cluster, consoleapi.CacheRequest{Op: consoleapi.CacheGet, Entry: k.Entry, Namespace: t.Namespace, Name: t.Name,
		Shard: k.Shard}, true, nil
}

// target is where the hub Application of an instance name runs.
func (c *Console) target(ctx context.Context, instance string) (Target, bool, error) {
	ns, name := argocd.SplitInstanceName(instance, c.ArgoCDNamespace)
	return c.Targets.Target(ctx, ns, name)
}

// get reads an entry from a cluster, or from the answers held.
func (c *Console) get(ctx context.Context, cluster, key string, req consoleapi.CacheRequest) ([]byte, bool, error) {
	if a, ok := c.heldAnswer(key); ok {
		c.Hub.metrics.cacheHits.Inc()
		return a.value, a.found, nil
	}
	resp, err := c.Hub.Do(ctx, cluster, consoleapi.Request{Cache: &req})
	if err != nil {
		return nil, false, err
	}
	var a heldAnswer
	switch resp.Code {
	case http.StatusOK:
		a = heldAnswer{value: resp.Body, found: true}
	case http.StatusNotFound:
		a = heldAnswer{}
	default:
		return nil, false, fmt.Errorf("cluster %s: %s", cluster, resp.Message)
	}
	c.hold(key, a)
	return a.value, a.found, nil
}

func (c *Console) heldAnswer(key string) (heldAnswer, bool) {
	if c.HoldFor <= 0 {
		return heldAnswer{}, false
	}
	c.heldMu.Lock()
	defer c.heldMu.Unlock()
	if c.held == nil {
		return heldAnswer{}, false
	}
	v, ok := c.held.Get(key)
	if !ok || time.Since(v.(heldAnswer).at) > c.HoldFor {
		return heldAnswer{}, false
	}
	return v.(heldAnswer), true
}

func (c *Console) hold(key string, a heldAnswer) {
	if c.HoldFor <= 0 {
		return
	}
	a.at = time.Now()
	c.heldMu.Lock()
	defer c.heldMu.Unlock()
	if c.held == nil {
		c.held = lru.New(heldAnswers)
	}
	c.held.Add(key, a)
}

// forget drops the answers held for an Application's instance name: its tree changed.
func (c *Console) forget(instance string) {
	c.heldMu.Lock()
	defer c.heldMu.Unlock()
	if c.held == nil {
		return
	}
	for _, entry := range []string{argocd.CacheEntryTree, argocd.CacheEntryManagedResources} {
		c.held.Remove(argocd.CacheKey{Entry: entry, Instance: instance}.String())
	}
	// Shards of a large tree are rare; they expire with HoldFor.
}

func gunzip(gz []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("decompress cache entry: %w", err)
	}
	out, err := io.ReadAll(io.LimitReader(r, 64<<20+1))
	if err != nil {
		return nil, fmt.Errorf("decompress cache entry: %w", err)
	}
	if len(out) > 64<<20 {
		return nil, errMaxEntry
	}
	return out, nil
}

// Subscription is a pulled Application's tree-changed channel, subscribed on its cluster.
type Subscription struct {
	call *Call
}

// Subscribe subscribes to the tree-changed channel of a pulled Application; handled is false for a channel the
// console does not answer. notify is called for each change until the subscription is closed or fails.
func (c *Console) Subscribe(ctx context.Context, channel string, notify func()) (_ *Subscription, handled bool, err error) {
	instance, ok := argocd.ParseTreeChangedChannel(channel)
	if !ok {
		return nil, false, nil
	}
	t, ok, err := c.target(ctx, instance)
	if err != nil || !ok {
		return nil, ok, err
	}
	call, err := c.Hub.Open(ctx, t.Cluster, consoleapi.Request{Cache: &consoleapi.CacheRequest{
		Op: consoleapi.CacheSubscribe, Entry: argocd.CacheEntryManagedResources, Namespace: t.Namespace, Name: t.Name}})
	if err != nil {
		return nil, true, err
	}
	waitCtx, cancel := context.WithTimeout(ctx, c.Hub.Timeout())
	defer cancel()
	first, err := call.Next(waitCtx)
	if err == nil && first.Code != http.StatusOK {
		err = errors.New(first.Message)
	}
	if err != nil {
		call.Close()
		return nil, true, fmt.Errorf("cluster %s: subscribe to %s: %w", t.Cluster, channel, err)
	}
	go func() {
		for {
			resp, err := call.Next(context.Background())
			if err != nil || !resp.More {
				return
			}
			c.forget(instance)
			notify()
		}
	}()
	return &Subscription{call: call}, true, nil
}

// Close ends the subscription on the cluster.
func (s *Subscription) Close() { s.call.Close() }
