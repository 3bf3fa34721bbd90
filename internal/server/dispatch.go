package server

import (
	"context"
	"hash/fnv"
	"sync"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	pbv1 "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc/protobuf/v1"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/types"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/server"

	"github.com/argocd-pull/argocd-pull/internal/server/store"
)

// errFeedInterrupted ends every subscription when the database feed was interrupted: notifications may
// have been lost, and the clients' resync after they resubscribe recovers them.
var errFeedInterrupted = status.Error(codes.Unavailable, "the server's event feed was interrupted; resubscribe to resync")

// errShuttingDown ends every subscription when the server stops.
var errShuttingDown = status.Error(codes.Unavailable, "the server is shutting down; resubscribe to another instance")

// errMissedChanges ends the subscriptions that may have missed a change: the server could not load a change
// another instance committed, or could not answer a client's resync. sdk-go's clients do not send a failed
// resync again, but they resync after every subscription.
var errMissedChanges = status.Error(codes.Unavailable, "the server may have missed changes for this subscription; resubscribe to resync")

// sourceSub is one open source subscription.
type sourceSub struct {
	source string
	events chan *pbv1.CloudEvent
	cancel context.CancelCauseFunc
}

// agentSub is one open agent subscription.
type agentSub struct {
	consumer string
	cancel   context.CancelCauseFunc
}

// streams tracks the open subscriptions of this instance: source subscriptions by source ID, agent
// subscriptions by consumer, and the cancel functions of all streams, so that they can be reset.
type streams struct {
	mu      sync.RWMutex
	sources map[string]map[*sourceSub]struct{}
	agents  map[string]map[*agentSub]struct{}
	cancels map[*context.CancelCauseFunc]struct{}
}

func newStreams() *streams {
	return &streams{sources: map[string]map[*sourceSub]struct{}{}, agents: map[string]map[*agentSub]struct{}{},
		cancels: map[*context.CancelCauseFunc]struct{}{}}
}

// addAgent registers an agent subscription of a consumer until the returned function is called.
func (s *streams) addAgent(consumer string, cancel context.CancelCauseFunc) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub := &agentSub{consumer: consumer, cancel: cancel}
	if s.agents[consumer] == nil {
		s.agents[consumer] = map[*agentSub]struct{}{}
	}
	s.agents[consumer][sub] = struct{}{}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.agents[consumer], sub)
		if len(s.agents[consumer]) == 0 {
			delete(s.agents, consumer)
		}
	}
}

func (s *streams) hasAgent(consumer string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.agents[consumer]) > 0
}

// track registers a stream's cancel function until the returned function is called.
func (s *streams) track(cancel context.CancelCauseFunc) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := &cancel
	s.cancels[key] = struct{}{}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.cancels, key)
	}
}

// resetAll ends every open stream with cause.
func (s *streams) resetAll(cause error) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for cancel := range s.cancels {
		(*cancel)(cause)
	}
	return len(s.cancels)
}

// resetAgents ends the subscriptions of the consumers' agents with cause.
func (s *streams) resetAgents(consumers []string, cause error) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for _, c := range consumers {
		for sub := range s.agents[c] {
			sub.cancel(cause)
			n++
		}
	}
	return n
}

// resetSources ends the subscriptions of the sources with cause.
func (s *streams) resetSources(sources []string, cause error) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	n := 0
	for _, src := range sources {
		for sub := range s.sources[src] {
			sub.cancel(cause)
			n++
		}
	}
	return n
}

func (s *streams) addSource(sub *sourceSub) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sources[sub.source] == nil {
		s.sources[sub.source] = map[*sourceSub]struct{}{}
	}
	s.sources[sub.source][sub] = struct{}{}
}

func (s *streams) removeSource(sub *sourceSub) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.sources[sub.source], sub)
	if len(s.sources[sub.source]) == 0 {
		delete(s.sources, sub.source)
	}
}

func (s *streams) hasSource(source string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.sources[source]) > 0
}

func (s *streams) sourceSubs(source string) []*sourceSub {
	s.mu.RLock()
	defer s.mu.RUnlock()
	subs := make([]*sourceSub, 0, len(s.sources[source]))
	for sub := range s.sources[source] {
		subs = append(subs, sub)
	}
	return subs
}

// dispatcher sends committed changes to the subscribers of this instance: specs to agents through the
// sdk-go broker, statuses to sources. Specs go through shards keyed by consumer, which keeps each
// consumer's order and keeps a slow agent from holding up the others.
type dispatcher struct {
	streams     *streams
	agents      server.AgentEventServer
	metrics     *metrics
	shards      []chan *cloudevents.Event
	sendTimeout time.Duration
}

func newDispatcher(st *streams, agents server.AgentEventServer, m *metrics, shards int, sendTimeout time.Duration) *dispatcher {
	d := &dispatcher{streams: st, agents: agents, metrics: m, sendTimeout: sendTimeout}
	for range shards {
		d.shards = append(d.shards, make(chan *cloudevents.Event, 1024))
	}
	return d
}

func (d *dispatcher) run(ctx context.Context) {
	for _, shard := range d.shards {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case evt := <-shard:
					d.sendToAgents(ctx, evt)
				}
			}
		}()
	}
}

func (d *dispatcher) sendToAgents(ctx context.Context, evt *cloudevents.Event) {
	if err := d.agents.HandleEvent(ctx, evt); err != nil {
		klog.FromContext(ctx).Error(err, "Failed to send a spec to its agent", "resourceID", evt.Extensions()[types.ExtensionResourceID])
		return
	}
	d.metrics.eventsOut.WithLabelValues(endpointAgent, eventTypeLabel(evt.Type())).Inc()
}

// spec queues a resource's spec for its agent when the agent is subscribed here.
func (d *dispatcher) spec(ctx context.Context, row store.SpecRow) {
	if !d.streams.hasAgent(row.Consumer) {
		return
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(row.Consumer))
	select {
	case d.shards[int(h.Sum32())%len(d.shards)] <- specEvent(row):
	case <-ctx.Done():
	}
}

// status sends an event to every subscription of a source on this instance. A subscription that cannot
// take it within the send timeout is closed; its source resubscribes and resyncs.
func (d *dispatcher) status(ctx context.Context, source string, evt *cloudevents.Event) {
	subs := d.streams.sourceSubs(source)
	if len(subs) == 0 {
		return
	}
	pb, err := toProto(ctx, evt)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Failed to encode a status for its source", "source", source)
		return
	}
	for _, sub := range subs {
		d.deliver(ctx, sub, pb)
	}
}

func (d *dispatcher) deliver(ctx context.Context, sub *sourceSub, pb *pbv1.CloudEvent) {
	select {
	case sub.events <- pb:
		return
	default:
	}
	timer := time.NewTimer(d.sendTimeout)
	defer timer.Stop()
	select {
	case sub.events <- pb:
	case <-timer.C:
		sub.cancel(status.Errorf(codes.ResourceExhausted, "source %s did not keep up with its statuses; resubscribe to resync", sub.source))
	case <-ctx.Done():
	}
}

// notifications handles changes committed by other instances. A change that cannot be loaded ends the
// subscriptions it was meant for, so that their clients resync instead of missing it.
func (d *dispatcher) notifications(ctx context.Context, st store.Store, notes []store.Notification) {
	var specIDs, statusIDs, consumers, sources []string
	for _, n := range notes {
		switch {
		case n.Kind == store.KindSpec && d.streams.hasAgent(n.Consumer):
			specIDs, consumers = append(specIDs, n.ID), append(consumers, n.Consumer)
		case n.Kind == store.KindStatus && d.streams.hasSource(n.Source):
			statusIDs, sources = append(statusIDs, n.ID), append(sources, n.Source)
		case n.Kind == store.KindRemoved && d.streams.hasSource(n.Source):
			d.status(ctx, n.Source, removedEvent(n))
		}
	}
	logger := klog.FromContext(ctx)
	if err := d.loadSpecs(ctx, st, specIDs); err != nil {
		n := d.streams.resetAgents(consumers, errMissedChanges)
		d.metrics.streamResets.Inc()
		logger.Error(err, "Failed to load specs another instance committed; reset their agents' subscriptions", "subscriptions", n)
	}
	if err := d.loadStatuses(ctx, st, statusIDs); err != nil {
		n := d.streams.resetSources(sources, errMissedChanges)
		d.metrics.streamResets.Inc()
		logger.Error(err, "Failed to load statuses another instance committed; reset their sources' subscriptions", "subscriptions", n)
	}
}

func (d *dispatcher) loadSpecs(ctx context.Context, st store.Store, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	rows, err := st.LoadSpecs(ctx, ids)
	for _, row := range rows {
		d.spec(ctx, row)
	}
	return err
}

func (d *dispatcher) loadStatuses(ctx context.Context, st store.Store, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	rows, err := st.LoadStatuses(ctx, ids)
	for _, row := range rows {
		d.status(ctx, row.Source, statusEvent(row, types.UpdateRequestAction))
	}
	return err
}

// eventTypeLabel is the subresource.action part of an event type, a bounded metric label.
func eventTypeLabel(t string) string {
	et, err := types.ParseCloudEventsType(t)
	if err != nil {
		return "unknown"
	}
	return string(et.SubResource) + "." + string(et.Action)
}
