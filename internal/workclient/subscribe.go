package workclient

import (
	"context"
	"fmt"
	"sync"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"k8s.io/klog/v2"
	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options"

	"github.com/argocd-pull/argocd-pull/internal/reconnect"
)

// guardedTransport wraps sdk-go's gRPC transport (v1.3.0) against two faults of the client that drives it.
//
// Subscribe is a no-op while the transport holds a subscription. sdk-go's client retries a failed Subscribe
// until it succeeds; when a reconnect's request to subscribe comes while an earlier one is still being
// retried, it asks again once that one succeeded, and its gRPC transport answers "transport has already
// subscribed" every few seconds for ever: a log line each time, for a subscription that works. Close ends the
// subscription, as the transport's own Close does.
//
// A closed connection nobody reported is reported. The transport closes a failed connection after a send to
// the client's reconnect loop that is dropped when the loop is not waiting (see reconnect.OnStuck); the client
// then subscribes and publishes on the closed connection for ever. A call that fails on a closed connection
// while the loop waits is such a case: the loop closes the transport before it sleeps, and it connects again
// only through Connect, which waits for the lock the failed call held. So the failure is reported on the
// channel the loop reads, the same way the transport reports, and the loop connects again.
type guardedTransport struct {
	options.CloudEventTransport

	errs    chan error
	forward sync.Once

	mu         sync.Mutex
	subscribed bool
}

func newGuardedTransport(t options.CloudEventTransport) *guardedTransport {
	return &guardedTransport{CloudEventTransport: t, errs: make(chan error)}
}

func (t *guardedTransport) Connect(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.CloudEventTransport.Connect(ctx); err != nil {
		return err
	}
	// The client connects with its own context, which ends with it.
	t.forward.Do(func() { go t.forwardErrors(ctx) })
	return nil
}

func (t *guardedTransport) Subscribe(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.subscribed {
		return nil
	}
	if err := t.CloudEventTransport.Subscribe(ctx); err != nil {
		t.reportClosed(ctx, err)
		return err
	}
	t.subscribed = true
	return nil
}

func (t *guardedTransport) Send(ctx context.Context, evt cloudevents.Event) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	err := t.CloudEventTransport.Send(ctx, evt)
	t.reportClosed(ctx, err)
	return err
}

func (t *guardedTransport) Close(ctx context.Context) error {
	t.mu.Lock()
	t.subscribed = false
	t.mu.Unlock()
	return t.CloudEventTransport.Close(ctx)
}

// ErrorChan is where the client's reconnect loop learns that the connection failed.
func (t *guardedTransport) ErrorChan() <-chan error {
	return t.errs
}

// reportClosed reports err if it is a call's failure on a closed connection. The caller holds t.mu.
func (t *guardedTransport) reportClosed(ctx context.Context, err error) {
	if reconnect.ClosedConnection(err) {
		t.report(ctx, fmt.Errorf("a call failed on a closed connection: %w", err))
	}
}

// report hands err to the client's reconnect loop if it is waiting for one, as the transport does: a loop that
// is not waiting is handling a failure already.
func (t *guardedTransport) report(ctx context.Context, err error) {
	select {
	case t.errs <- err:
	default:
		klog.FromContext(ctx).V(2).Info("The reconnect loop is busy; a connection failure was not reported", "err", err)
	}
}

// forwardErrors hands the transport's reports on until ctx ends.
func (t *guardedTransport) forwardErrors(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case err, ok := <-t.CloudEventTransport.ErrorChan():
			if !ok {
				return
			}
			t.report(ctx, err)
		}
	}
}
