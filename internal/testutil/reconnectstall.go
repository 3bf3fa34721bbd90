package testutil

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// ReconnectStall holds sdk-go's reconnect loops when they log that they reconnected, as a busy machine can,
// until a connection failure went unreported meanwhile (or for hold at most). sdk-go v1.3.0's gRPC transport
// closes a failed connection after a report that is dropped when the loop is not waiting: held here, a loop
// takes its client for connected on a connection that is closed. Once a report was dropped, the loops are not
// held any more.
type ReconnectStall struct {
	hold     time.Duration
	dropOnce sync.Once
	dropped  chan struct{}
	holding  atomic.Int32 // loops held now
}

// StallReconnects returns a context whose logger watches for a ReconnectStall: the sdk-go clients built with
// it are held after they reconnect, for hold at most.
func StallReconnects(ctx context.Context, hold time.Duration) (context.Context, *ReconnectStall) {
	s := &ReconnectStall{hold: hold, dropped: make(chan struct{})}
	return klog.NewContext(ctx, logr.New(&stallSink{LogSink: klog.Background().GetSink(), s: s})), s
}

// observe holds a reconnect loop that logs its reconnect, and notes a report that was dropped.
func (s *ReconnectStall) observe(msg string, kv []any) {
	switch msg {
	case "the cloudevents client is reconnected":
		s.holding.Add(1)
		select {
		case <-s.dropped:
		case <-time.After(s.hold):
		}
		s.holding.Add(-1)
	case "no error channel available to report grpc disconnected", // sdk-go's transport
		"The reconnect loop is busy; a connection failure was not reported": // the controller's guard
		// A failure of a connection whose loop is held after its reconnect; a connection the loop closed
		// itself reports SHUTDOWN.
		if s.holding.Load() > 0 && !strings.Contains(fmt.Sprint(kv...), "SHUTDOWN") {
			s.dropOnce.Do(func() { close(s.dropped) })
		}
	}
}

// stallSink is klog's sink, with names and values, that shows every message to a ReconnectStall (the ones it
// looks for are at -v=2) and logs what klog would.
type stallSink struct {
	logr.LogSink
	s *ReconnectStall
}

func (k *stallSink) Init(logr.RuntimeInfo) {} // leaves the shared klog sink as it is (logr.New calls it)
func (k *stallSink) Enabled(int) bool      { return true }
func (k *stallSink) Info(level int, msg string, kv ...any) {
	k.s.observe(msg, kv)
	if k.LogSink.Enabled(level) {
		k.LogSink.Info(level, msg, kv...)
	}
}
func (k *stallSink) WithValues(kv ...any) logr.LogSink {
	return &stallSink{LogSink: k.LogSink.WithValues(kv...), s: k.s}
}
func (k *stallSink) WithName(name string) logr.LogSink {
	return &stallSink{LogSink: k.LogSink.WithName(name), s: k.s}
}

// Forced waits until a connection failed unreported while its reconnect loop was held.
func (s *ReconnectStall) Forced(t testing.TB) {
	t.Helper()
	EventuallyTrue(t, 30*time.Second, "a connection to fail unreported while its reconnect loop is held", func() bool {
		select {
		case <-s.dropped:
			return true
		default:
			return false
		}
	})
}
