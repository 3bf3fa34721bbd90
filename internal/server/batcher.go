package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// batcher groups concurrent requests into one call of flush: while a flush runs, new requests queue, and
// the next flush takes all of them (up to max). A batch also waits up to linger after its first request for
// more to come (group commit): without it, requests that arrive a few milliseconds apart are flushed one by one,
// each a transaction of its own. One worker gathers at a time, so that waiting workers do not split the
// requests between them; the others flush meanwhile. Each caller waits for its own result.
type batcher[In, Out any] struct {
	calls   chan *batchCall[In, Out]
	flush   func(ctx context.Context, in []In) ([]Out, error)
	max     int
	timeout time.Duration
	linger  time.Duration
	// gathering is held by the worker that gathers the next batch.
	gathering sync.Mutex
	// stopped is closed when the flushing goroutines stop: a queued request then has no result to wait for.
	stopped chan struct{}
}

// errBatcherStopped answers a request queued when the server stopped.
var errBatcherStopped = errors.New("the server is stopping")

type batchCall[In, Out any] struct {
	in   In
	out  Out
	err  error
	done chan struct{}
}

func newBatcher[In, Out any](max int, timeout, linger time.Duration, flush func(ctx context.Context, in []In) ([]Out, error)) *batcher[In, Out] {
	return &batcher[In, Out]{calls: make(chan *batchCall[In, Out], 4*max), flush: flush, max: max, timeout: timeout,
		linger: linger, stopped: make(chan struct{})}
}

// run starts the flushing goroutines; they stop when ctx ends.
func (b *batcher[In, Out]) run(ctx context.Context, workers int) {
	for range workers {
		go b.loop(ctx)
	}
	go func() {
		<-ctx.Done()
		close(b.stopped)
	}()
}

// do submits one request and waits for its result. A request not queued yet is given up when ctx ends; once
// queued it is committed with its batch whatever becomes of ctx, so do waits for its result all the same: the
// caller must act on what was committed (send a status on to its source, say) even when its own client has
// gone. An agent whose connection broke while its deletion was being committed sends the confirmation again,
// finds the work removed, and the source would never have heard of it.
func (b *batcher[In, Out]) do(ctx context.Context, in In) (Out, error) {
	var zero Out
	c := &batchCall[In, Out]{in: in, done: make(chan struct{})}
	select {
	case b.calls <- c:
	case <-ctx.Done():
		return zero, ctx.Err()
	}
	select {
	case <-c.done:
		return c.out, c.err
	case <-b.stopped:
		return zero, errBatcherStopped
	}
}

func (b *batcher[In, Out]) loop(ctx context.Context) {
	for {
		batch := b.gather(ctx)
		if batch == nil {
			return
		}
		b.flushBatch(ctx, batch)
	}
}

// gather takes the next batch: the first request, those queued behind it, and those that come within linger
// of the first, up to max. It returns nil when ctx ends before a first request; a batch begun is returned
// (and flushed) when ctx ends, since its requests are taken.
func (b *batcher[In, Out]) gather(ctx context.Context) []*batchCall[In, Out] {
	b.gathering.Lock()
	defer b.gathering.Unlock()
	var first *batchCall[In, Out]
	select {
	case <-ctx.Done():
		return nil
	case first = <-b.calls:
	}
	batch := []*batchCall[In, Out]{first}
drain:
	for len(batch) < b.max {
		select {
		case c := <-b.calls:
			batch = append(batch, c)
		default:
			break drain
		}
	}
	if b.linger <= 0 || len(batch) >= b.max {
		return batch
	}
	timer := time.NewTimer(b.linger)
	defer timer.Stop()
	for len(batch) < b.max {
		select {
		case c := <-b.calls:
			batch = append(batch, c)
		case <-timer.C:
			return batch
		case <-ctx.Done():
			return batch
		}
	}
	return batch
}

func (b *batcher[In, Out]) flushBatch(ctx context.Context, batch []*batchCall[In, Out]) {
	in := make([]In, len(batch))
	for i, c := range batch {
		in[i] = c.in
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
	outs, err := b.flush(fctx, in)
	cancel()
	if err == nil && len(outs) != len(in) {
		err = fmt.Errorf("batch of %d returned %d results", len(in), len(outs))
	}
	for i, c := range batch {
		if err != nil {
			c.err = err
		} else {
			c.out = outs[i]
		}
		close(c.done)
	}
}
