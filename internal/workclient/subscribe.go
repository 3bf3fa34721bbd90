package workclient

import (
	"context"
	"sync"

	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options"
)

// subscribeOnce makes a transport's Subscribe a no-op while the transport holds a subscription. sdk-go's client
// retries a failed Subscribe until it succeeds; when a reconnect's request to subscribe comes while an earlier
// one is still being retried, it asks again once that one succeeded, and its gRPC transport answers "transport
// has already subscribed" every few seconds for ever: a log line each time, for a subscription that works. Close
// ends the subscription, as the transport's own Close does.
type subscribeOnce struct {
	options.CloudEventTransport

	mu         sync.Mutex
	subscribed bool
}

func (t *subscribeOnce) Subscribe(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.subscribed {
		return nil
	}
	if err := t.CloudEventTransport.Subscribe(ctx); err != nil {
		return err
	}
	t.subscribed = true
	return nil
}

func (t *subscribeOnce) Close(ctx context.Context) error {
	t.mu.Lock()
	t.subscribed = false
	t.mu.Unlock()
	return t.CloudEventTransport.Close(ctx)
}
