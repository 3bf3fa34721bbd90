package reconnect

import (
	"context"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"
)

// A client stuck on a closed connection. sdk-go v1.3.0's gRPC transport watches its connection and, when the
// connection fails, reports it to the client's reconnect loop and closes it. The report is a send that is
// dropped when the loop is not waiting at that instant, which happens when the connection fails right after
// a reconnect (a Subscribe retry waits for the transport's lock during the reconnect and fails at once on a
// server that is still down). The loop then takes the client for connected for ever: it never reconnects,
// and every Subscribe and publish fails with "the client connection is closing". The chaos matrix caught a
// real OCM work agent so, once in four full runs. Where the transport is ours to wrap (the controller's source
// client) the wrapper reports the closed connection itself; the agent clients are built inside sdk-go and OCM
// from a config file, so a client built with OnStuck's context is restarted instead.

const (
	// StuckAfter is how long a client may fail to subscribe on a closed connection, with its reconnect loop
	// silent, before it is taken for stuck. A client that is not stuck meets closed connections too, while
	// its server is away (a Subscribe retry runs on the connection that just failed, before the loop has
	// connected again), but its loop reports each failure it handles.
	StuckAfter = 10 * time.Second

	// The messages sdk-go's client hands to the apimachinery error handlers, with its context: a failed
	// Subscribe, and its reconnect loop handling a failed connection or failing to connect.
	subscribeFailed  = "failed to subscribe after connection"
	loopDisconnected = "the cloudevents client is disconnected"
	loopConnectFail  = "the cloudevents client reconnect failed"
)

type stuckKey struct{}

// stuckWatch follows the failed subscriptions of one client.
type stuckWatch struct {
	restart func()

	mu    sync.Mutex
	since time.Time // the first failure on a closed connection of the current run of them
	last  time.Time // the latest failure on a closed connection
	fired bool
}

// OnStuck returns a context for an sdk-go CloudEvents client: when the client built with it has failed to
// subscribe on a closed connection for StuckAfter, restart is called, once. restart must not block; it
// should cancel the client's context and build a new client. Install must have been called.
func OnStuck(ctx context.Context, restart func()) context.Context {
	return context.WithValue(ctx, stuckKey{}, &stuckWatch{restart: restart})
}

// ClosedConnection reports whether err is gRPC's answer to a call on a connection that was closed.
func ClosedConnection(err error) bool {
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.Canceled && strings.HasSuffix(s.Message(), "the client connection is closing")
}

// observeSubscribeFailure is an apimachinery error handler: sdk-go's clients report their failed subscriptions
// and their reconnect loop's failures through utilruntime.HandleErrorWithContext, with the client's context.
func observeSubscribeFailure(ctx context.Context, err error, msg string, _ ...any) {
	w, ok := ctx.Value(stuckKey{}).(*stuckWatch)
	if !ok {
		return
	}
	switch msg {
	case subscribeFailed:
		w.failed(time.Now(), ClosedConnection(err))
	case loopDisconnected, loopConnectFail:
		w.failed(time.Now(), false)
	}
}

// failed records a failed subscription, or the reconnect loop at work (closed false), at now, and restarts the
// client when the failures on a closed connection have lasted StuckAfter. Failures more than twice MaxDelay
// apart, or anything else between them, begin a new run: the client got a working connection, or its loop
// knows that it has none.
func (w *stuckWatch) failed(now time.Time, closed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !closed {
		w.since, w.last = time.Time{}, time.Time{}
		return
	}
	if w.last.IsZero() || now.Sub(w.last) > 2*MaxDelay {
		w.since = now
	}
	w.last = now
	if w.fired || now.Sub(w.since) < StuckAfter {
		return
	}
	w.fired = true
	go w.restart()
}

// alreadySubscribed is what sdk-go's gRPC transport answers a Subscribe while it holds a subscription. Its
// client asks so when a reconnect's request to subscribe came while an earlier one was being retried, and then
// every few seconds until the next reconnect: the subscription works, and nothing failed.
const alreadySubscribed = "transport has already subscribed"

// installErrorHandlers puts observeSubscribeFailure before the apimachinery error handlers, and keeps sdk-go's
// retries of a subscription it holds out of them (a log line every few seconds, for ever, otherwise).
func installErrorHandlers() {
	handlers := utilruntime.ErrorHandlers
	utilruntime.ErrorHandlers = []utilruntime.ErrorHandler{func(ctx context.Context, err error, msg string, kv ...any) {
		observeSubscribeFailure(ctx, err, msg, kv...)
		if msg == subscribeFailed && err != nil && err.Error() == alreadySubscribed {
			return
		}
		for _, h := range handlers {
			h(ctx, err, msg, kv...)
		}
	}}
}

// RestartWhenStuck calls run with a context for OnStuck and, each time the client run built with it is stuck,
// ends that context, waits for run to return and calls it again, until ctx ends. run builds its client with
// the context it is given and returns once that context ends.
func RestartWhenStuck(ctx context.Context, run func(context.Context) error) error {
	for {
		runCtx, cancel := context.WithCancel(ctx)
		stuck := make(chan struct{})
		err := run(OnStuck(runCtx, func() {
			close(stuck)
			cancel()
		}))
		cancel()
		select {
		case <-stuck:
		default:
			return err
		}
		if ctx.Err() != nil {
			return err
		}
		klog.FromContext(ctx).Info("Restarting a CloudEvents client that was stuck on a closed connection", "stuckFor", StuckAfter)
	}
}
