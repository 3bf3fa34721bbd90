package workclient

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/options"
)

// countingTransport answers Subscribe as sdk-go's gRPC transport does: once, until Close.
type countingTransport struct {
	options.CloudEventTransport
	subscribed       bool
	subscribes, fail int
}

func (t *countingTransport) Subscribe(context.Context) error {
	t.subscribes++
	if t.fail > 0 {
		t.fail--
		return errors.New("connection refused")
	}
	if t.subscribed {
		return errors.New("transport has already subscribed")
	}
	t.subscribed = true
	return nil
}

func (t *countingTransport) Close(context.Context) error {
	t.subscribed = false
	return nil
}

// TestGuardedSubscribeOnce: a second Subscribe while subscribed succeeds without asking the transport, a failed one
// is not taken for a subscription, and after Close the transport is asked again.
func TestGuardedSubscribeOnce(t *testing.T) {
	ctx := context.Background()
	inner := &countingTransport{fail: 1}
	tr := newGuardedTransport(inner)
	if err := tr.Subscribe(ctx); err == nil {
		t.Fatal("a failed subscription succeeded")
	}
	for i := range 3 {
		if err := tr.Subscribe(ctx); err != nil {
			t.Fatalf("subscribe %d: %v", i, err)
		}
	}
	if inner.subscribes != 2 {
		t.Fatalf("the transport was asked %d times, want 2 (the failure and the subscription)", inner.subscribes)
	}
	if err := tr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tr.Subscribe(ctx); err != nil || inner.subscribes != 3 {
		t.Fatalf("after close: %v, asked %d times", err, inner.subscribes)
	}
}

// TestUnreachable: the publish errors of a connection that is down, as sdk-go and gRPC word them (seen when the
// controller's link to the server was cut), are told from the server's answers.
func TestUnreachable(t *testing.T) {
	for _, c := range []struct {
		msg  string
		want bool
	}{
		{"Failed to publish resource w: the cloudevents client is not ready", true},
		{"Failed to publish resource w: rpc error: code = Unavailable desc = error reading from server: EOF", true},
		{"Failed to publish resource w: rpc error: code = Canceled desc = grpc: the client connection is closing", true},
		{"Failed to publish resource w: transport not connected", true},
		{"Failed to publish resource w: rpc error: code = InvalidArgument desc = event e1: invalid manifests", false},
		{"Failed to publish resource w: rpc error: code = FailedPrecondition desc = stale: status of resource r is for version 1", false},
		{"Failed to publish resource w: rpc error: code = NotFound desc = consumer not registered: consumer ghost", false},
	} {
		if got := unreachable(c.msg); got != c.want {
			t.Errorf("unreachable(%q) = %v, want %v", c.msg, got, c.want)
		}
		if got := Unreachable(errors.New(c.msg)); got != c.want {
			t.Errorf("Unreachable(%q) = %v, want %v", c.msg, got, c.want)
		}
	}
	if !Unreachable(fmt.Errorf("publish work c/w: %w: EOF", ErrUnavailable)) || Unreachable(nil) {
		t.Error("Unreachable does not tell ErrUnavailable, or takes nil for an error")
	}
}
