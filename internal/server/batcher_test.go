package server

import (
	"context"
	"errors"
	"testing"
	"time"
)

type batchResult struct {
	out int
	err error
}

// TestBatcherResultOutlivesCaller: a request whose caller goes away while its batch is being committed still
// gets its result, so that the caller can send on what was committed (an agent's deletion confirmation whose
// connection was cut meanwhile reached the source only with the next resync, a minute or more later).
func TestBatcherResultOutlivesCaller(t *testing.T) {
	flushing, release := make(chan struct{}), make(chan struct{})
	b := newBatcher(10, time.Minute, func(_ context.Context, in []int) ([]int, error) {
		close(flushing)
		<-release
		out := make([]int, len(in))
		for i, v := range in {
			out[i] = 2 * v
		}
		return out, nil
	})
	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	b.run(runCtx, 1)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan batchResult, 1)
	go func() {
		out, err := b.do(ctx, 21)
		done <- batchResult{out, err}
	}()
	<-flushing
	cancel()
	select {
	case r := <-done:
		t.Fatalf("do returned (%d, %v) while its batch was being committed", r.out, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if r := <-done; r.err != nil || r.out != 42 {
		t.Fatalf("do = (%d, %v), want (42, nil)", r.out, r.err)
	}
}

// TestBatcherStopped: a request queued when the batcher stops is answered, not left waiting.
func TestBatcherStopped(t *testing.T) {
	b := newBatcher(10, time.Minute, func(_ context.Context, in []int) ([]int, error) { return in, nil })
	runCtx, stop := context.WithCancel(context.Background())
	stop()
	b.run(runCtx, 1)
	done := make(chan batchResult, 1)
	go func() {
		out, err := b.do(context.Background(), 1)
		done <- batchResult{out, err}
	}()
	select {
	case r := <-done:
		// The loop may still have taken the request before it saw the end.
		if r.err != nil && !errors.Is(r.err, errBatcherStopped) {
			t.Fatalf("do = (%d, %v)", r.out, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a request queued after the batcher stopped is still waiting")
	}
}
