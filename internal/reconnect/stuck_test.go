package reconnect

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
)

// closedConnectionError is what a call on a closed gRPC connection returns.
func closedConnectionError(t *testing.T) error {
	t.Helper()
	conn, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = grpc_health_v1.NewHealthClient(conn).Check(context.Background(), &grpc_health_v1.HealthCheckRequest{})
	return err
}

func TestClosedConnection(t *testing.T) {
	if err := closedConnectionError(t); !ClosedConnection(err) {
		t.Fatalf("%v is not taken for a closed connection", err)
	}
	for _, err := range []error{nil, errors.New("the client connection is closing"), context.Canceled} {
		if ClosedConnection(err) {
			t.Errorf("%v is taken for a closed connection", err)
		}
	}
}

// TestStuckWatch: failures on a closed connection restart the client once they have lasted StuckAfter, and
// only once; a failure of another kind, or a gap longer than a reconnect takes, starts the count again.
func TestStuckWatch(t *testing.T) {
	type failure struct {
		at     time.Duration
		closed bool
	}
	retries := func(from, to time.Duration) []failure { // a retry every MaxDelay, as a stuck client's
		var fs []failure
		for at := from; at <= to; at += MaxDelay {
			fs = append(fs, failure{at: at, closed: true})
		}
		return fs
	}
	for _, tc := range []struct {
		name     string
		failures []failure
		restarts int
	}{
		{name: "one failure between a close and the next connect", failures: retries(0, 0)},
		{name: "closed for less than StuckAfter", failures: retries(0, StuckAfter-time.Second)},
		{name: "stuck", failures: retries(0, StuckAfter+MaxDelay), restarts: 1},
		{name: "stuck for long: restarted once", failures: retries(0, 10*StuckAfter), restarts: 1},
		{name: "another failure in between", failures: append(append(retries(0, 6*time.Second),
			failure{at: 7 * time.Second}), retries(8*time.Second, 16*time.Second)...)},
		{name: "separate outages", failures: append(retries(0, 6*time.Second), retries(6*time.Second+3*MaxDelay, 20*time.Second)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restarted := make(chan struct{}, 10)
			w := &stuckWatch{restart: func() { restarted <- struct{}{} }}
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for _, f := range tc.failures {
				w.failed(t0.Add(f.at), f.closed)
			}
			got := 0
			for done := false; !done; {
				select {
				case <-restarted:
					got++
				case <-time.After(100 * time.Millisecond):
					done = true
				}
			}
			if got != tc.restarts {
				t.Fatalf("restarted %d times, want %d", got, tc.restarts)
			}
		})
	}
}

// TestObserveSubscribeFailure: the error handler follows the failed subscriptions of the client whose context
// it is handed, and nothing else.
func TestObserveSubscribeFailure(t *testing.T) {
	closed := closedConnectionError(t)
	restarted := make(chan struct{}, 1)
	ctx := OnStuck(context.Background(), func() { restarted <- struct{}{} })
	w := ctx.Value(stuckKey{}).(*stuckWatch)

	observeSubscribeFailure(context.Background(), closed, subscribeFailed) // another client's
	observeSubscribeFailure(ctx, closed, "failed to close the cloudevents protocol")
	if !w.last.IsZero() {
		t.Fatal("a failure that is not this client's subscription was counted")
	}
	observeSubscribeFailure(ctx, closed, subscribeFailed)
	if w.last.IsZero() {
		t.Fatal("the client's failed subscription was not counted")
	}
	observeSubscribeFailure(ctx, errors.New("grpc connection is disconnected (state=TRANSIENT_FAILURE)"), loopDisconnected)
	if !w.last.IsZero() {
		t.Fatal("the reconnect loop handled a failure, and the failures before it still count")
	}
	observeSubscribeFailure(ctx, closed, subscribeFailed)
	w.mu.Lock()
	w.since, w.last = w.since.Add(-StuckAfter), w.last.Add(-time.Second)
	w.mu.Unlock()
	observeSubscribeFailure(ctx, closed, subscribeFailed)
	select {
	case <-restarted:
	case <-time.After(5 * time.Second):
		t.Fatal("a client stuck for StuckAfter was not restarted")
	}
}

// TestInstallErrorHandlers: the installed handlers watch the clients' subscriptions, hand every other error to
// the handlers there were, and keep sdk-go's "transport has already subscribed" retries out of them.
func TestInstallErrorHandlers(t *testing.T) {
	saved := utilruntime.ErrorHandlers
	t.Cleanup(func() { utilruntime.ErrorHandlers = saved })
	var handled []string
	utilruntime.ErrorHandlers = []utilruntime.ErrorHandler{func(_ context.Context, err error, msg string, _ ...any) {
		handled = append(handled, msg+": "+err.Error())
	}}
	installErrorHandlers()

	ctx := OnStuck(context.Background(), func() {})
	closed := closedConnectionError(t)
	utilruntime.HandleErrorWithContext(ctx, errors.New(alreadySubscribed), subscribeFailed)
	utilruntime.HandleErrorWithContext(ctx, closed, subscribeFailed)
	utilruntime.HandleErrorWithContext(ctx, errors.New("grpc connection is disconnected (state=IDLE)"), loopDisconnected)
	if len(handled) != 2 || handled[0] != subscribeFailed+": "+closed.Error() {
		t.Fatalf("handled %q, want the closed connection and the disconnect", handled)
	}
	if w := ctx.Value(stuckKey{}).(*stuckWatch); !w.last.IsZero() {
		t.Fatal("the disconnect the reconnect loop handled did not end the run of failures")
	}
}
