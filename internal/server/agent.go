package server

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"k8s.io/klog/v2"

	"open-cluster-management.io/sdk-go/pkg/cloudevents/constants"
	pbv1 "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc/protobuf/v1"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/payload"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/types"

	"github.com/argocd-pull/argocd-pull/internal/server/store"
)

// agentEndpoint serves agents sdk-go's CloudEventService, as sdk-go's gRPC broker does: a subscription
// stream of the cluster's specs with the subscription ID in its header and heartbeats, spec resyncs, and
// status updates. It authenticates and authorises each call, checks the consumer, and rejects bad events
// with a clear status. Unlike sdk-go's broker it finds a spec's subscriptions by consumer, and closes a
// subscription that does not keep up instead of blocking every consumer that shares its dispatch shard.
type agentEndpoint struct {
	pbv1.UnimplementedCloudEventServiceServer
	s       *Server
	service *agentService
}

func (e *agentEndpoint) Publish(ctx context.Context, req *pbv1.PublishRequest) (*emptypb.Empty, error) {
	if err := e.publish(ctx, req); err != nil {
		e.s.metrics.reject(endpointAgent, err)
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

func (e *agentEndpoint) publish(ctx context.Context, req *pbv1.PublishRequest) error {
	evt, et, err := decodePublish(ctx, req, e.s.limits)
	if err != nil {
		return err
	}
	cluster, err := stringExtension(evt, types.ExtensionClusterName)
	if err != nil {
		return err
	}
	id := identityFrom(ctx)
	if !id.mayActAsAgent(cluster) {
		return status.Errorf(codes.PermissionDenied, "%s may not publish events of cluster %s", id, cluster)
	}
	switch {
	case et.SubResource == types.SubResourceSpec && et.Action == types.ResyncRequestAction:
		err = e.resyncSpecs(ctx, evt, cluster)
	case et.SubResource == types.SubResourceStatus && et.Action != types.ResyncRequestAction:
		err = e.service.HandleStatusUpdate(ctx, evt)
	default:
		err = invalid(evt, "agents publish status events and spec resync requests, not %s", evt.Type())
	}
	if err == nil {
		e.s.metrics.eventsIn.WithLabelValues(endpointAgent, eventTypeLabel(evt.Type())).Inc()
	}
	return err
}

// resyncSpecs answers an agent's spec resync: every resource that is newer than the agent's copy or
// missing from it, every resource marked for deletion, and a delete for every resource the agent holds
// that the server does not. (sdk-go's broker answers without a resource version on its deletes, which
// sdk-go's agent codec rejects.) The answer goes to the consumer's subscriptions on this instance; an
// agent resyncs once it has its subscription's header, which is sent after the subscription registered.
func (e *agentEndpoint) resyncSpecs(ctx context.Context, evt *cloudevents.Event, cluster string) error {
	// Recorded as soon as the request comes: a server answering every agent's resync after a restart is slow to
	// answer, not the agents to ask.
	e.s.streams.agentResynced(cluster)
	if err := e.s.checkConsumer(ctx, cluster); err != nil {
		return err
	}
	held, err := payload.DecodeSpecResyncRequest(*evt)
	if err != nil {
		return invalid(evt, "%v", err)
	}
	if err := e.answerSpecResync(ctx, held.Versions, cluster); err != nil {
		// sdk-go's agent does not send a failed resync again; it resyncs when it subscribes again.
		n := e.s.streams.resetAgents([]string{cluster}, errMissedChanges)
		klog.FromContext(ctx).Info("Could not answer a spec resync; reset the agent's subscriptions", "consumer", cluster,
			"subscriptions", n)
		return err
	}
	return nil
}

func (e *agentEndpoint) answerSpecResync(ctx context.Context, held []payload.ResourceVersion, cluster string) error {
	current, err := e.s.store.SpecVersions(ctx, cluster)
	if err != nil {
		return storeStatus(err)
	}
	send, gone := resyncAnswer(held, current)
	// Only the specs the agent lacks are read: after a server restart every agent resyncs, and reading every
	// spec of 15,000 works took PostgreSQL 3.7 s for none to send.
	var rows []store.SpecRow
	if len(send) > 0 {
		if rows, err = e.s.store.LoadSpecs(ctx, send); err != nil {
			return storeStatus(err)
		}
		slices.SortFunc(rows, func(a, b store.SpecRow) int { return strings.Compare(a.ID, b.ID) })
		gone = append(gone, removedMeanwhile(held, send, rows)...)
	}
	e.s.metrics.resyncs.WithLabelValues(endpointAgent).Inc()
	events := make([]*cloudevents.Event, 0, len(rows)+len(gone))
	for _, row := range rows {
		events = append(events, specEvent(row))
	}
	for _, v := range gone {
		events = append(events, goneSpecEvent(v.ResourceID, cluster, v.ResourceVersion))
	}
	for _, out := range events {
		out.SetType(types.CloudEventsType{CloudEventsDataType: dataType, SubResource: types.SubResourceSpec,
			Action: types.ResyncResponseAction}.String())
		if err := e.s.dispatch.toAgents(ctx, cluster, out); err != nil {
			return status.Errorf(codes.Unavailable, "send resync answer to cluster %s: %v", cluster, err)
		}
	}
	return nil
}

// resyncAnswer picks what brings an agent holding the given versions to the current state: the resources
// newer than its copy, missing from it or being deleted (send, to load and send whole), and those it holds
// that the server does not (gone, to delete).
func resyncAnswer(held []payload.ResourceVersion, current []store.SpecVersion) (send []string, gone []payload.ResourceVersion) {
	versions := make(map[string]int64, len(held))
	for _, v := range held {
		versions[v.ResourceID] = v.ResourceVersion
	}
	for _, c := range current {
		last, ok := versions[c.ID]
		delete(versions, c.ID)
		if c.Deleting || !ok || c.Version > last {
			send = append(send, c.ID)
		}
	}
	for id, version := range versions {
		gone = append(gone, payload.ResourceVersion{ResourceID: id, ResourceVersion: version})
	}
	return send, gone
}

// removedMeanwhile returns the resources the agent holds that were to be sent and were removed before their
// specs were loaded: the agent deletes them, as any it holds that the server does not.
func removedMeanwhile(held []payload.ResourceVersion, send []string, loaded []store.SpecRow) []payload.ResourceVersion {
	if len(loaded) == len(send) {
		return nil
	}
	found := make(map[string]bool, len(loaded))
	for _, row := range loaded {
		found[row.ID] = true
	}
	var gone []payload.ResourceVersion
	for _, v := range held {
		if slices.Contains(send, v.ResourceID) && !found[v.ResourceID] {
			gone = append(gone, v)
		}
	}
	return gone
}

func (e *agentEndpoint) Subscribe(req *pbv1.SubscriptionRequest, stream pbv1.CloudEventService_SubscribeServer) error {
	err := e.subscribe(req, stream)
	if status.Code(err) != codes.OK && status.Code(err) != codes.Unavailable {
		e.s.metrics.reject(endpointAgent, err)
	}
	return err
}

func (e *agentEndpoint) subscribe(req *pbv1.SubscriptionRequest, stream pbv1.CloudEventService_SubscribeServer) error {
	cluster := req.GetClusterName()
	if cluster == "" {
		return status.Error(codes.InvalidArgument, "an agent subscription needs a cluster name")
	}
	if req.GetDataType() != dataType.String() {
		return status.Errorf(codes.InvalidArgument, "data type %q is not served; only %s", req.GetDataType(), dataType)
	}
	id := identityFrom(stream.Context())
	if !id.mayActAsAgent(cluster) {
		return status.Errorf(codes.PermissionDenied, "%s may not subscribe for cluster %s", id, cluster)
	}
	if err := e.s.checkConsumer(stream.Context(), cluster); err != nil {
		return err
	}
	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	untrack := e.s.streams.track(cancel)
	defer untrack()
	sub := &agentSub{consumer: cluster, subscription: newSubscription(ctx, cancel, e.s.opts.AgentQueueLength)}
	// Registered before the header reaches the agent, which resyncs once it has it: the answer finds it.
	removeAgent := e.s.streams.addAgent(sub)
	defer removeAgent()
	defer e.s.recordAgentSubscription(ctx, cluster)()
	e.s.metrics.connectedAgents.Inc()
	defer e.s.metrics.connectedAgents.Dec()
	subID := uuid.NewString()
	if err := stream.SendHeader(metadata.Pairs(constants.GRPCSubscriptionIDKey, subID)); err != nil {
		return fmt.Errorf("send subscription header to the agent of cluster %s: %w", cluster, err)
	}
	logger := klog.FromContext(ctx).WithValues("consumer", cluster, "subID", subID)
	logger.Info("Agent subscribed")
	if grace := e.s.opts.AgentResyncGrace; grace > 0 {
		watch := time.AfterFunc(grace, func() { e.closeUnresynced(klog.NewContext(ctx, logger), sub) })
		defer watch.Stop()
	}
	err := e.s.pump(klog.NewContext(ctx, logger), stream, sub.events, endpointAgent)
	logger.Info("Agent subscription ended", "reason", err)
	return err
}

// errNoResync ends an agent subscription that sent no spec resync within the grace period.
var errNoResync = status.Error(codes.Unavailable, "no spec resync since subscribing; reconnect, subscribe and resync")

// closeUnresynced closes the connection of an agent subscription that has not resynced, unless it has by now. An
// agent resyncs after every subscription: it learns so what changed while it was away. One that does not never
// does until it reconnects: sdk-go v1.3.0's agent client sends its resync once, when it has subscribed, drops the
// request to send it when busy, and does not send a failed one again; at 150,000 Applications one of 3,000
// agents subscribed twice after a server restart, its second subscription without a receiver, and never
// resynced. Closing only the stream would go unnoticed by such a client; closing its connection makes its
// reconnect loop start over: connect, subscribe, receive, resync.
func (e *agentEndpoint) closeUnresynced(ctx context.Context, sub *agentSub) {
	if sub.resynced.Load() || ctx.Err() != nil {
		// Resynced, or the subscription ended meanwhile.
		return
	}
	e.s.metrics.unresynced.Inc()
	addr := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	closed := e.s.agentConns != nil && addr != "" && e.s.agentConns.closeConn(addr)
	klog.FromContext(ctx).Info("Agent sent no spec resync since it subscribed; closed its connection",
		"grace", e.s.opts.AgentResyncGrace, "peer", addr, "connectionClosed", closed)
	sub.cancel(errNoResync)
}

// recordAgentSubscription records in the database that an agent of the consumer is subscribed here, so that every
// instance can tell (the REST API's connected_agents), and returns what forgets it. The record is an answer to
// "is the cluster's agent connected", not a condition of the subscription: a database that fails here is logged.
func (s *Server) recordAgentSubscription(ctx context.Context, consumer string) func() {
	logger := klog.FromContext(ctx)
	id, err := s.store.AddAgentSubscription(ctx, consumer)
	if err != nil {
		logger.Error(err, "Record agent subscription", "consumer", consumer)
		return func() {}
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := s.store.RemoveAgentSubscription(ctx, id); err != nil {
			logger.Error(err, "Forget agent subscription", "consumer", consumer)
		}
	}
}

// agentService stores its agents' status updates.
type agentService struct {
	s *Server
}

// HandleStatusUpdate stores an agent's status, and sends it to its source when it changed.
func (a *agentService) HandleStatusUpdate(ctx context.Context, evt *cloudevents.Event) error {
	w, err := decodeStatus(evt)
	if err != nil {
		return err
	}
	if id := identityFrom(ctx); !id.mayActAsAgent(w.Consumer) {
		return status.Errorf(codes.PermissionDenied, "%s may not report status for cluster %s", id, w.Consumer)
	}
	res, err := a.s.statuses.do(ctx, w)
	// What is committed is sent on even when the agent has gone meanwhile (see batcher.do).
	ctx = context.WithoutCancel(ctx)
	if err != nil {
		return storeStatus(err)
	}
	if res.Err != nil {
		return storeStatus(res.Err)
	}
	switch res.Outcome {
	case store.StatusApplied:
		a.s.dispatch.status(ctx, res.Row.Source, statusEvent(res.Row, types.UpdateRequestAction))
	case store.StatusRemoved:
		a.s.dispatch.status(ctx, res.Row.Source, removedEvent(store.Notification{ID: res.Row.ID,
			Consumer: res.Row.Consumer, Source: res.Row.Source, Version: res.Row.Version, Sequence: res.Row.Sequence}))
		klog.FromContext(ctx).V(2).Info("Deleted a resource its agent confirmed gone", "resourceID", res.Row.ID, "consumer", res.Row.Consumer)
	}
	return nil
}

// checkConsumer rejects an unknown consumer, or registers it when auto-registration is on.
func (s *Server) checkConsumer(ctx context.Context, name string) error {
	if s.opts.AutoRegisterConsumers {
		if err := s.store.EnsureConsumer(ctx, name); err != nil {
			return storeStatus(err)
		}
		return nil
	}
	_, err := s.store.GetConsumer(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return status.Errorf(codes.NotFound, "consumer %s is not registered", name)
	}
	if err != nil {
		return storeStatus(err)
	}
	return nil
}

// storeStatus maps a store error to the gRPC status a client gets.
func storeStatus(err error) error {
	var code codes.Code
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrConsumerNotFound):
		code = codes.NotFound
	case errors.Is(err, store.ErrStale), errors.Is(err, store.ErrDeleting):
		code = codes.FailedPrecondition
	case errors.Is(err, store.ErrForbidden):
		code = codes.PermissionDenied
	case errors.Is(err, store.ErrInvalid):
		code = codes.InvalidArgument
	case errors.Is(err, store.ErrConflict):
		code = codes.AlreadyExists
	default:
		// The database is unreachable or failed: the client should retry.
		code = codes.Unavailable
	}
	return status.Error(code, err.Error())
}
