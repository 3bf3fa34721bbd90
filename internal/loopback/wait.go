package loopback

import (
	"context"
	"fmt"
	"time"
)

// progressEvery is how often a wait that goes on says what it waits for.
var progressEvery = 15 * time.Second

type progressKey struct{}

// WithProgress returns a context whose waits report through progress what they wait for when it takes a
// while. The waits have no deadline of their own: the context's deadline bounds them all, so that a loaded
// machine gets the time the caller gives, not a fixed step limit.
func WithProgress(ctx context.Context, progress func(string)) context.Context {
	return context.WithValue(ctx, progressKey{}, progress)
}

func reportProgress(ctx context.Context, format string, args ...any) {
	if progress, ok := ctx.Value(progressKey{}).(func(string)); ok && progress != nil {
		progress(fmt.Sprintf(format, args...))
	}
}

// waitFor polls check every interval until it succeeds, stop is closed or ctx ends. Every progressEvery it
// reports what it waits for and the last answer.
func waitFor(ctx context.Context, what string, interval time.Duration, stop <-chan struct{}, check func(context.Context) error) error {
	start := time.Now()
	next := start.Add(progressEvery)
	for {
		last := check(ctx)
		if last == nil {
			return nil
		}
		if now := time.Now(); now.After(next) {
			reportProgress(ctx, "still waiting for %s after %s: %v", what, now.Sub(start).Round(time.Second), last)
			next = now.Add(progressEvery)
		}
		select {
		case <-stop:
			return fmt.Errorf("wait for %s: stopped: %w", what, last)
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w after %s: %w", what, context.Cause(ctx), time.Since(start).Round(time.Second), last)
		case <-time.After(interval):
		}
	}
}

// Poll polls check every 100 ms until it succeeds or ctx ends; a wait that goes on says what it waits for
// (WithProgress).
func Poll(ctx context.Context, what string, check func(context.Context) error) error {
	return waitFor(ctx, what, 100*time.Millisecond, nil, check)
}
