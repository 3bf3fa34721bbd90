package server

import (
	"context"
	"errors"
	"slices"
	"sync"
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
	b := newBatcher(10, time.Minute, 0, func(_ context.Context, in []int) ([]int, error) {
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
	b := newBatcher(10, time.Minute, 0, func(_ context.Context, in []int) ([]int, error) { return in, nil })
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

// TestBatcherLinger: requests that come a few milliseconds apart go in one batch while it waits (group commit),
// with two workers as the server runs them; a batch that is full goes at once; a request after the wait
// starts the next batch.
func TestBatcherLinger(t *testing.T) {
	var mu sync.Mutex
	var batches [][]int
	b := newBatcher(4, time.Minute, 300*time.Millisecond, func(_ context.Context, in []int) ([]int, error) {
		mu.Lock()
		batches = append(batches, slices.Clone(in))
		mu.Unlock()
		return in, nil
	})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	b.run(ctx, 2)

	var wg sync.WaitGroup
	send := func(v int) {
		wg.Go(func() {
			if out, err := b.do(ctx, v); err != nil || out != v {
				t.Errorf("do(%d) = (%d, %v)", v, out, err)
			}
		})
	}
	start := time.Now()
	for v := range 3 {
		send(v)
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	waited := time.Since(start)
	for v := 10; v < 16; v++ { // six at once: a full batch of four, then two
		send(v)
	}
	wg.Wait()
	time.Sleep(400 * time.Millisecond)
	send(20)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(batches) != 4 || !slices.Equal(batches[0], []int{0, 1, 2}) || len(batches[1]) != 4 || len(batches[2]) != 2 ||
		!slices.Equal(batches[3], []int{20}) {
		t.Errorf("batches %v, want [0 1 2], four of 10…15, the other two, [20]", batches)
	}
	if waited < 300*time.Millisecond {
		t.Errorf("the first batch was committed %s after its first request, before the wait of 300ms", waited)
	}
}
