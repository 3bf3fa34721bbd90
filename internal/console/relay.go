package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/argocd-pull/argocd-pull/internal/consoleapi"
)

// Relay is what the console needs of the database that several argocd-pull server instances share
// (store.ConsoleRelay): who holds which cluster's console stream, and a channel between instances.
type Relay interface {
	HoldConsole(ctx context.Context, cluster string) error
	ReleaseConsole(ctx context.Context, cluster string) error
	ConsoleHolder(ctx context.Context, cluster string, timeout time.Duration) (string, error)
	SendConsole(ctx context.Context, to string, body []byte) error
	ListenConsole(ctx context.Context, onMessage func(ctx context.Context, body []byte)) error
}

// relay carries requests for clusters whose console stream another instance holds to that instance, and the
// answers back. argocd-server may reach any instance's doors; an agent's stream is on one instance.
type relay struct {
	db         Relay
	self       string
	liveWithin time.Duration
	hub        *Hub

	mu      sync.Mutex
	next    uint64
	waiting map[string]*Call // calls sent to other instances, by call ID
	serving map[string]*Call // calls served here for other instances, by call ID
}

// relayMessage is one message between instances.
type relayMessage struct {
	// Kind is relayRequest, relayAnswer or relayCancel.
	Kind string `json:"kind"`
	// Call identifies the call across instances: "<requesting instance>/<n>".
	Call    string               `json:"call"`
	From    string               `json:"from,omitempty"`
	Cluster string               `json:"cluster,omitempty"`
	Request *consoleapi.Request  `json:"request,omitempty"`
	Answer  *consoleapi.Response `json:"answer,omitempty"`
}

const (
	relayRequest = "request"
	relayAnswer  = "answer"
	relayCancel  = "cancel"
)

// UseRelay makes the Hub reach the console streams other instances hold, through db; self is this instance's
// ID, and an instance whose heartbeat is older than liveWithin is gone. Call RunRelay to receive.
func (h *Hub) UseRelay(db Relay, self string, liveWithin time.Duration) {
	h.relay = &relay{db: db, self: self, liveWithin: liveWithin, hub: h, waiting: map[string]*Call{}, serving: map[string]*Call{}}
}

// RunRelay receives the other instances' requests and answers until ctx ends.
func (h *Hub) RunRelay(ctx context.Context) error {
	if h.relay == nil {
		return nil
	}
	return h.relay.db.ListenConsole(ctx, h.relay.receive)
}

// hold records this instance as the holder of a cluster's stream.
func (r *relay) hold(ctx context.Context, cluster string) {
	if r == nil {
		return
	}
	if err := r.db.HoldConsole(ctx, cluster); err != nil {
		klog.FromContext(ctx).Info("Cannot record the console stream in the database; other instances cannot reach it", "cluster", cluster, "err", err)
	}
}

func (r *relay) release(ctx context.Context, cluster string) {
	if r == nil {
		return
	}
	if err := r.db.ReleaseConsole(ctx, cluster); err != nil {
		klog.FromContext(ctx).V(1).Info("Cannot forget the console stream in the database", "cluster", cluster, "err", err)
	}
}

// holder is the other live instance that holds a cluster's stream, or "".
func (r *relay) holder(ctx context.Context, cluster string) string {
	if r == nil {
		return ""
	}
	id, err := r.db.ConsoleHolder(ctx, cluster, r.liveWithin)
	if err != nil || id == r.self {
		return ""
	}
	return id
}

// open sends a request to the instance that holds the cluster's stream.
func (r *relay) open(ctx context.Context, cluster string, req consoleapi.Request) (*Call, error) {
	to := r.holder(ctx, cluster)
	if to == "" {
		return nil, notConnected(cluster)
	}
	c := newCall()
	r.mu.Lock()
	r.next++
	id := r.self + "/" + strconv.FormatUint(r.next, 10)
	r.waiting[id] = c
	r.mu.Unlock()
	c.forget = func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		_, ok := r.waiting[id]
		delete(r.waiting, id)
		return ok
	}
	c.cancel = func() { _ = r.send(context.Background(), to, relayMessage{Kind: relayCancel, Call: id}) }
	if err := r.send(ctx, to, relayMessage{Kind: relayRequest, Call: id, From: r.self, Cluster: cluster, Request: &req}); err != nil {
		c.forget()
		return nil, fmt.Errorf("cluster %s: %w", cluster, err)
	}
	return c, nil
}

func (r *relay) send(ctx context.Context, to string, m relayMessage) error {
	body, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode console relay message: %w", err)
	}
	return r.db.SendConsole(ctx, to, body)
}

// receive handles one message from another instance.
func (r *relay) receive(ctx context.Context, body []byte) {
	var m relayMessage
	if err := json.Unmarshal(body, &m); err != nil {
		klog.FromContext(ctx).Info("Ignoring a malformed console relay message", "err", err)
		return
	}
	switch m.Kind {
	case relayRequest:
		if m.Request != nil {
			go r.serve(ctx, m)
		}
	case relayAnswer:
		r.mu.Lock()
		c := r.waiting[m.Call]
		if c != nil && m.Answer != nil && !m.Answer.More {
			delete(r.waiting, m.Call)
		}
		r.mu.Unlock()
		if c != nil && m.Answer != nil {
			c.deliver(m.Answer)
		}
	case relayCancel:
		r.mu.Lock()
		c := r.serving[m.Call]
		r.mu.Unlock()
		if c != nil {
			c.Close()
		}
	}
}

// serve sends another instance's request down a stream this instance holds and relays every part of the answer.
func (r *relay) serve(ctx context.Context, m relayMessage) {
	answer := func(a *consoleapi.Response) bool {
		err := r.send(ctx, m.From, relayMessage{Kind: relayAnswer, Call: m.Call, Answer: a})
		return err == nil
	}
	c, err := r.hub.openLocal(m.Cluster, *m.Request)
	if err != nil {
		answer(&consoleapi.Response{Code: http.StatusServiceUnavailable, Message: err.Error()})
		return
	}
	r.mu.Lock()
	r.serving[m.Call] = c
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.serving, m.Call)
		r.mu.Unlock()
		c.Close()
	}()
	for {
		a, err := c.Next(ctx)
		if err != nil {
			answer(&consoleapi.Response{Code: http.StatusBadGateway, Message: err.Error()})
			return
		}
		a.ID = 0
		if !answer(a) || !a.More {
			return
		}
	}
}
