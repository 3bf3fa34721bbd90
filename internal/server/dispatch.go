package server

import (
	"context"
	"hash/fnv"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	pbv1 "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc/protobuf/v1"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/types"

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

// subscription is one open subscription stream: the events queued for it, and how it ends.
type subscription struct {
	events chan *pbv1.CloudEvent
	// done is closed when the stream ends.
	done   <-chan struct{}
	cancel context.CancelCauseFunc
}

func newSubscription(ctx context.Context, cancel context.CancelCauseFunc, queueLength int) subscription {
	return subscription{events: make(chan *pbv1.CloudEvent, queueLength), done: ctx.Done(), cancel: cancel}
}

// sourceSub is one open source subscription.
type sourceSub struct {
	source string
	subscription
}

// agentSub is one open agent subscription.
type agentSub struct {
	consumer string
	subscription
	// resynced is set when the consumer's agent asked for a spec resync while the subscription was open.
	resynced atomic.Bool
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

// addAgent registers an agent subscription until the returned function is called.
func (s *streams) addAgent(sub *agentSub) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.agents[sub.consumer] == nil {
		s.agents[sub.consumer] = map[*agentSub]struct{}{}
	}
	s.agents[sub.consumer][sub] = struct{}{}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.agents[sub.consumer], sub)
		if len(s.agents[sub.consumer]) == 0 {
			delete(s.agents, sub.consumer)
		}
	}
}

// agentResynced records that the consumer's agent asked for a spec resync: its open subscriptions have resynced.
func (s *streams) agentResynced(consumer string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for sub := range s.agents[consumer] {
		sub.resynced.Store(true)
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

// agentSubs returns the open subscriptions of the consumer's agents.
func (s *streams) agentSubs(consumer string) []*agentSub {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Collect(maps.Keys(s.agents[consumer]))
}

// sourceSubs returns the open subscriptions of the source.
func (s *streams) sourceSubs(source string) []*sourceSub {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Collect(maps.Keys(s.sources[source]))
}

// dispatcher sends committed changes to the subscribers of this instance: specs to agents, statuses to
// sources. Specs go through shards keyed by consumer, which keeps each consumer's order and keeps a slow agent
// from holding up the others.
type dispatcher struct {
	streams *streams
	metrics *metrics
	shards  []chan consumerSpec
	// sourceTimeout and agentTimeout are how long a subscription's queue may stay full.
	sourceTimeout, agentTimeout time.Duration
}

// consumerSpec is a spec event on its way to its consumer's agents.
type consumerSpec struct {
	consumer string
	evt      *cloudevents.Event
}

func newDispatcher(st *streams, m *metrics, shards int, sourceTimeout, agentTimeout time.Duration) *dispatcher {
	d := &dispatcher{streams: st, metrics: m, sourceTimeout: sourceTimeout, agentTimeout: agentTimeout}
	for range shards {
		d.shards = append(d.shards, make(chan consumerSpec, 1024))
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
				case out := <-shard:
					if err := d.toAgents(ctx, out.consumer, out.evt); err != nil {
						klog.FromContext(ctx).Error(err, "Failed to send a spec to its agent", "consumer", out.consumer,
							"resourceID", out.evt.Extensions()[types.ExtensionResourceID])
					}
				}
			}
		}()
	}
}

// toAgents sends a spec event to every subscription of the consumer's agents on this instance, found by
// consumer (sdk-go's broker compared the event's cluster with every subscriber's). A subscription that
// cannot take it within the send timeout is closed; its agent resubscribes and resyncs.
func (d *dispatcher) toAgents(ctx context.Context, consumer string, evt *cloudevents.Event) error {
	subs := d.streams.agentSubs(consumer)
	if len(subs) == 0 {
		return nil
	}
	pb, err := toProto(ctx, evt)
	if err != nil {
		return err
	}
	for _, sub := range subs {
		d.deliver(ctx, &sub.subscription, pb, d.agentTimeout, func() error {
			return status.Errorf(codes.ResourceExhausted, "the agent of cluster %s did not keep up with its specs; resubscribe to resync", consumer)
		})
	}
	return nil
}

// shard is the index of the consumer's shard.
func (d *dispatcher) shard(consumer string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(consumer))
	return int(h.Sum32() % uint32(len(d.shards)))
}

// spec queues a resource's spec for its agent when the agent is subscribed here.
func (d *dispatcher) spec(ctx context.Context, row store.SpecRow) {
	if !d.streams.hasAgent(row.Consumer) {
		return
	}
	select {
	case d.shards[d.shard(row.Consumer)] <- consumerSpec{consumer: row.Consumer, evt: specEvent(row)}:
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
		d.deliver(ctx, &sub.subscription, pb, d.sourceTimeout, func() error {
			return status.Errorf(codes.ResourceExhausted, "source %s did not keep up with its statuses; resubscribe to resync", sub.source)
		})
	}
}

// deliver queues an event on a subscription. One whose queue stays full for timeout is closed with the
// cause tooSlow gives.
func (d *dispatcher) deliver(ctx context.Context, sub *subscription, pb *pbv1.CloudEvent, timeout time.Duration, tooSlow func() error) {
	select {
	case sub.events <- pb:
		return
	case <-sub.done:
		return
	default:
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case sub.events <- pb:
	case <-sub.done:
	case <-timer.C:
		sub.cancel(tooSlow())
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
