// Package console is the hub's side of argocd-pull's console: it lets the hub's own argocd-server show a pulled
// Application as if the hub's Argo CD managed it — resource tree, live and target state, diff, live manifests,
// events, pod logs — without the hub ever dialling a managed cluster. It serves two doors argocd-server already
// uses: a redis proxy in front of the hub's redis, which answers the cache entries of pulled Applications (their
// tree and managed resources) from the cluster that runs them, and an HTTPS proxy that argocd-server uses as the
// managed clusters' API (the cluster secret's proxyUrl), which answers the reads Argo CD makes. Both ask the
// cluster's agent over the console stream the agent opened on argocd-pull server (package consoleapi), only
// when someone looks, and hold answers briefly. It holds no state another server instance needs; it never
// writes to the hub.
package console

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/argocd-pull/argocd-pull/internal/consoleapi"
)

// ErrNotConnected is a cluster whose agent has no console stream open here.
var ErrNotConnected = errors.New("not connected to the console")

// Hub holds the agents' console streams and sends them requests. With a Relay, requests for a cluster whose
// stream another server instance holds go there and back through the database the instances share.
type Hub struct {
	timeout time.Duration

	mu       sync.Mutex
	sessions map[string]*session
	metrics  *metrics

	relay *relay
	// closing ends every stream when the Hub is closed.
	closing   chan struct{}
	closeOnce sync.Once
}

// NewHub returns a Hub whose requests wait at most timeout for a first answer.
func NewHub(timeout time.Duration) *Hub {
	return &Hub{timeout: timeout, sessions: map[string]*session{}, metrics: newMetrics(), closing: make(chan struct{})}
}

// session is one agent's console stream.
type session struct {
	stream grpc.ServerStream
	sendMu sync.Mutex

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]*Call
	err     error
}

// Serve serves an agent's console stream until it ends. cluster is the agent's cluster, as its credentials
// say. A newer stream of the same cluster replaces an older one for new requests.
func (h *Hub) Serve(stream grpc.ServerStream, cluster string) error {
	s := &session{stream: stream, pending: map[uint64]*Call{}}
	h.mu.Lock()
	h.sessions[cluster] = s
	h.mu.Unlock()
	h.metrics.sessions.Inc()
	logger := klog.FromContext(stream.Context()).WithValues("cluster", cluster)
	logger.V(1).Info("Console stream opened")
	h.relay.hold(stream.Context(), cluster)
	defer func() {
		h.mu.Lock()
		last := h.sessions[cluster] == s
		if last {
			delete(h.sessions, cluster)
		}
		h.mu.Unlock()
		if last {
			h.relay.release(context.WithoutCancel(stream.Context()), cluster)
		}
		h.metrics.sessions.Dec()
		logger.V(1).Info("Console stream closed")
	}()
	received := make(chan error, 1)
	go func() { received <- s.receive() }()
	var err error
	select {
	case err = <-received:
	case <-h.closing:
		// Returning ends the stream; its receiver then stops with it.
		err = errHubClosed
	}
	s.end(fmt.Errorf("cluster %s: console stream ended: %w", cluster, err))
	if errors.Is(err, context.Canceled) || errors.Is(err, errHubClosed) || status.Code(err) == codes.Canceled {
		return nil
	}
	return err
}

// errHubClosed ends the streams of a Hub that is closed.
var errHubClosed = errors.New("the server is shutting down")

// Close ends every console stream: their agents open them again, on another instance if this one is going.
func (h *Hub) Close() {
	h.closeOnce.Do(func() { close(h.closing) })
}

// receive hands the agent's answers to their calls until the stream ends.
func (s *session) receive() error {
	for {
		resp := &consoleapi.Response{}
		if err := s.stream.RecvMsg(resp); err != nil {
			return err
		}
		s.mu.Lock()
		c := s.pending[resp.ID]
		if c != nil && !resp.More {
			delete(s.pending, resp.ID)
		}
		s.mu.Unlock()
		if c != nil {
			c.deliver(resp)
		}
	}
}

// end fails every call still waiting.
func (s *session) end(err error) {
	s.mu.Lock()
	s.err = err
	pending := s.pending
	s.pending = map[uint64]*Call{}
	s.mu.Unlock()
	for _, c := range pending {
		c.fail(err)
	}
}

func (s *session) send(req *consoleapi.Request) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.stream.SendMsg(req)
}

// Connected reports whether a cluster's agent has a console stream open here, or on another live instance.
func (h *Hub) Connected(ctx context.Context, cluster string) bool {
	h.mu.Lock()
	local := h.sessions[cluster] != nil
	h.mu.Unlock()
	return local || h.relay.holder(ctx, cluster) != ""
}

// Call is a request sent to an agent: one answer, or a stream of them (More set on all but the last).
type Call struct {
	answer chan *consoleapi.Response
	closed atomic.Bool
	mu     sync.Mutex
	err    error
	done   chan struct{}
	// forget stops routing answers to the call and reports whether it was still waiting for some; cancel
	// tells the agent (directly, or through the instance that holds its stream) to stop a streamed answer.
	forget func() bool
	cancel func()
}

func newCall() *Call {
	return &Call{answer: make(chan *consoleapi.Response, callBuffer), done: make(chan struct{})}
}

// callBuffer is how many parts of a streamed answer wait for their reader; a reader that falls further behind
// has its call cancelled rather than holding up the cluster's other answers.
const callBuffer = 64

// Open sends a request to a cluster's agent: over its stream when this instance holds it, else through the
// instance that does.
func (h *Hub) Open(ctx context.Context, cluster string, req consoleapi.Request) (*Call, error) {
	h.metrics.requests.WithLabelValues(requestKind(&req)).Inc()
	if c, err := h.openLocal(cluster, req); !errors.Is(err, ErrNotConnected) {
		return c, err
	}
	return h.relay.open(ctx, cluster, req)
}

// openLocal sends a request over a stream this instance holds.
func (h *Hub) openLocal(cluster string, req consoleapi.Request) (*Call, error) {
	h.mu.Lock()
	s := h.sessions[cluster]
	h.mu.Unlock()
	if s == nil {
		return nil, notConnected(cluster)
	}
	c := newCall()
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return nil, s.err
	}
	s.nextID++
	id := s.nextID
	s.pending[id] = c
	s.mu.Unlock()
	c.forget = func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, ok := s.pending[id]
		delete(s.pending, id)
		return ok
	}
	c.cancel = func() { _ = s.send(&consoleapi.Request{ID: id, Cancel: true}) }
	req.ID = id
	if err := s.send(&req); err != nil {
		c.forget()
		return nil, fmt.Errorf("cluster %s: send console request: %w", cluster, err)
	}
	return c, nil
}

func notConnected(cluster string) error {
	return fmt.Errorf("cluster %s: %w (its agent is offline, or runs without the console)", cluster, ErrNotConnected)
}

// Do sends a request and waits for its one answer, at most the Hub's timeout.
func (h *Hub) Do(ctx context.Context, cluster string, req consoleapi.Request) (*consoleapi.Response, error) {
	start := time.Now()
	c, err := h.Open(ctx, cluster, req)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	resp, err := c.Next(ctx)
	h.metrics.latency.WithLabelValues(requestKind(&req)).Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, fmt.Errorf("cluster %s: %w", cluster, err)
	}
	return resp, nil
}

// Timeout is how long a request waits for its first answer.
func (h *Hub) Timeout() time.Duration { return h.timeout }

// Next returns the next part of the answer; io.EOF-like completion is a part with More false. It fails when
// ctx ends, the stream ends, or the reader fell behind.
func (c *Call) Next(ctx context.Context) (*consoleapi.Response, error) {
	select {
	case r := <-c.answer:
		return r, nil
	default:
	}
	select {
	case r := <-c.answer:
		return r, nil
	case <-c.done:
		select {
		case r := <-c.answer:
			return r, nil
		default:
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return nil, c.err
	case <-ctx.Done():
		return nil, fmt.Errorf("no answer from the agent: %w", ctx.Err())
	}
}

// Close stops a call: a streamed answer still going is cancelled on the agent.
func (c *Call) Close() {
	if c.closed.Swap(true) {
		return
	}
	if c.forget() && c.cancel != nil {
		c.cancel()
	}
	c.fail(errClosed)
}

// errClosed ends the reading of a call that was closed.
var errClosed = errors.New("closed")

func (c *Call) deliver(r *consoleapi.Response) {
	select {
	case c.answer <- r:
	default:
		c.fail(errors.New("the reader of a streamed answer fell behind; cancelled"))
		c.Close()
	}
}

func (c *Call) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
		close(c.done)
	}
}

func requestKind(r *consoleapi.Request) string {
	switch {
	case r.Cache != nil:
		return "cache-" + r.Cache.Op
	case r.Kube != nil:
		return "kube"
	}
	return "cancel"
}
