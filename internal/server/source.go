package server

import (
	"context"
	"fmt"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cetypes "github.com/cloudevents/sdk-go/v2/types"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"k8s.io/klog/v2"

	"open-cluster-management.io/sdk-go/pkg/cloudevents/constants"
	pbv1 "open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options/grpc/protobuf/v1"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/payload"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/types"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/server/grpc/heartbeat"

	"github.com/argocd-pull/argocd-pull/internal/server/store"
)

// resyncChunk is how many statuses a source resync loads at a time.
const resyncChunk = 500

// sourceEndpoint serves sources: they publish spec events and status resync requests, and subscribe to
// the statuses of their own resources.
type sourceEndpoint struct {
	pbv1.UnimplementedCloudEventServiceServer
	s *Server
}

func (e *sourceEndpoint) Publish(ctx context.Context, req *pbv1.PublishRequest) (*emptypb.Empty, error) {
	if err := e.publish(ctx, req); err != nil {
		e.s.metrics.reject(endpointSource, err)
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

func (e *sourceEndpoint) publish(ctx context.Context, req *pbv1.PublishRequest) error {
	evt, et, err := decodePublish(ctx, req, e.s.limits)
	if err != nil {
		return err
	}
	id := identityFrom(ctx)
	if !id.mayActAsSource(evt.Source()) {
		return status.Errorf(codes.PermissionDenied, "%s may not publish events of source %s", id, evt.Source())
	}
	switch {
	case et.SubResource == types.SubResourceStatus && et.Action == types.ResyncRequestAction:
		err = e.resyncStatuses(ctx, evt)
	case et.SubResource == types.SubResourceSpec:
		err = e.applySpec(ctx, evt, et.Action)
	default:
		err = invalid(evt, "sources publish spec events and status resync requests, not %s", evt.Type())
	}
	if err == nil {
		e.s.metrics.eventsIn.WithLabelValues(endpointSource, eventTypeLabel(evt.Type())).Inc()
	}
	return err
}

func (e *sourceEndpoint) applySpec(ctx context.Context, evt *cloudevents.Event, action types.EventAction) error {
	w, err := decodeSpec(evt, action)
	if err != nil {
		return err
	}
	// What is committed is sent on even when the source has gone meanwhile (see batcher.do).
	res, err := e.s.specs.do(ctx, w)
	ctx = context.WithoutCancel(ctx)
	if err != nil {
		return storeStatus(err)
	}
	if res.Err != nil {
		return storeStatus(res.Err)
	}
	switch {
	case res.Gone:
		e.s.dispatch.status(ctx, w.Source, removedEvent(store.Notification{ID: w.ID, Consumer: w.Consumer, Source: w.Source}))
	case res.Send:
		e.s.dispatch.spec(ctx, res.Row)
	}
	return nil
}

// resyncStatuses answers a source's status resync: for every resource the source lists, send the stored
// status when its hash differs, and the final status of those the server no longer has. A resync that
// cannot be answered ends the source's subscriptions here: sdk-go's source client does not send a failed
// resync again, but it resyncs after it subscribes again.
func (e *sourceEndpoint) resyncStatuses(ctx context.Context, evt *cloudevents.Event) error {
	hashes, err := payload.DecodeStatusResyncRequest(*evt)
	if err != nil {
		return invalid(evt, "%v", err)
	}
	consumer := ""
	if v, ok := evt.Extensions()[types.ExtensionClusterName]; ok {
		consumer, _ = cetypes.ToString(v)
	}
	changed, err := e.answerStatusResync(ctx, evt.Source(), consumer, hashes.Hashes)
	if err != nil {
		n := e.s.streams.resetSources([]string{evt.Source()}, errMissedChanges)
		klog.FromContext(ctx).Info("Could not answer a status resync; reset the source's subscriptions", "source", evt.Source(),
			"consumer", consumer, "subscriptions", n)
		return err
	}
	klog.FromContext(ctx).V(2).Info("Answered a status resync", "source", evt.Source(), "consumer", consumer,
		"listed", len(hashes.Hashes), "changed", changed)
	return nil
}

// answerStatusResync sends the statuses that differ from the source's hashes and returns how many did.
func (e *sourceEndpoint) answerStatusResync(ctx context.Context, source, consumer string, hashes []payload.ResourceStatusHash) (int, error) {
	stored, err := e.s.store.StatusHashes(ctx, source, consumer)
	if err != nil {
		return 0, storeStatus(err)
	}
	e.s.metrics.resyncs.WithLabelValues(endpointSource).Inc()
	current := make(map[string]string, len(stored))
	for _, h := range stored {
		current[h.ID] = h.Hash
	}
	var changed []string
	for _, h := range hashes {
		hash, ok := current[h.ResourceID]
		switch {
		case !ok:
			e.s.dispatch.status(ctx, source, removedEvent(store.Notification{ID: h.ResourceID, Consumer: consumer, Source: source}))
		case hash != "" && hash != h.StatusHash:
			changed = append(changed, h.ResourceID)
		}
	}
	for start := 0; start < len(changed); start += resyncChunk {
		rows, err := e.s.store.LoadStatuses(ctx, changed[start:min(start+resyncChunk, len(changed))])
		if err != nil {
			return 0, storeStatus(err)
		}
		for _, row := range rows {
			e.s.dispatch.status(ctx, row.Source, statusEvent(row, types.ResyncResponseAction))
		}
	}
	return len(changed), nil
}

func (e *sourceEndpoint) Subscribe(req *pbv1.SubscriptionRequest, stream pbv1.CloudEventService_SubscribeServer) error {
	err := e.subscribe(req, stream)
	if status.Code(err) != codes.OK && status.Code(err) != codes.Unavailable {
		e.s.metrics.reject(endpointSource, err)
	}
	return err
}

func (e *sourceEndpoint) subscribe(req *pbv1.SubscriptionRequest, stream pbv1.CloudEventService_SubscribeServer) error {
	if req.GetSource() == "" {
		return status.Error(codes.InvalidArgument, "a source subscription needs a source ID")
	}
	if req.GetDataType() != dataType.String() {
		return status.Errorf(codes.InvalidArgument, "data type %q is not served; only %s", req.GetDataType(), dataType)
	}
	id := identityFrom(stream.Context())
	if !id.mayActAsSource(req.GetSource()) {
		return status.Errorf(codes.PermissionDenied, "%s may not subscribe to source %s", id, req.GetSource())
	}
	ctx, cancel := context.WithCancelCause(stream.Context())
	defer cancel(nil)
	untrack := e.s.streams.track(cancel)
	defer untrack()
	sub := &sourceSub{source: req.GetSource(), subscription: newSubscription(ctx, cancel, e.s.opts.SourceQueueLength)}
	// Register before the header reaches the client, so that nothing the client triggers after it is lost.
	e.s.streams.addSource(sub)
	defer e.s.streams.removeSource(sub)
	e.s.metrics.connectedSources.Inc()
	defer e.s.metrics.connectedSources.Dec()
	subID := uuid.NewString()
	if err := stream.SendHeader(metadata.Pairs(constants.GRPCSubscriptionIDKey, subID)); err != nil {
		return fmt.Errorf("send subscription header to source %s: %w", req.GetSource(), err)
	}
	logger := klog.FromContext(ctx).WithValues("source", req.GetSource(), "subID", subID)
	logger.Info("Source subscribed")
	err := e.s.pump(klog.NewContext(ctx, logger), stream, sub.events, endpointSource)
	logger.Info("Source subscription ended", "reason", err)
	return err
}

// pump sends queued events and heartbeats on a stream of the endpoint until its context ends, and returns the
// status the stream ends with. The sends run apart, so that a stream closed because its client stopped
// reading (its sends block on flow control) ends at once: returning ends the sends.
func (s *Server) pump(ctx context.Context, stream pbv1.CloudEventService_SubscribeServer, events <-chan *pbv1.CloudEvent, endpoint string) error {
	beats := heartbeat.NewHeartbeater(s.opts.StreamHeartbeatInterval, 1)
	go beats.Start(ctx)
	sendErr := make(chan error, 1)
	go func() {
		for {
			var evt *pbv1.CloudEvent
			select {
			case <-ctx.Done():
				return
			case evt = <-beats.Heartbeat():
			case evt = <-events:
			}
			if err := stream.Send(evt); err != nil {
				sendErr <- err
				return
			}
			if evt.GetType() != types.HeartbeatCloudEventsType {
				s.metrics.eventsOut.WithLabelValues(endpoint, eventTypeLabel(evt.GetType())).Inc()
			}
		}
	}()
	select {
	case <-ctx.Done():
		return streamEndStatus(ctx)
	case err := <-sendErr:
		return err
	}
}

// streamEndStatus is what a stream ends with when its context ended: the server's own cause, or nothing
// when the client went away.
func streamEndStatus(ctx context.Context) error {
	cause := context.Cause(ctx)
	if _, ok := status.FromError(cause); ok && cause != nil && cause != context.Canceled {
		return cause
	}
	return nil
}
