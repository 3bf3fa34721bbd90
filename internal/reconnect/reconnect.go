// Package reconnect paces how soon the sdk-go CloudEvents clients of a process connect again after they lost
// their server. sdk-go's own backoff waits 5–10 s after the first loss, then 25–50 s, then one to two minutes,
// and every client of a process shares it (it resets after ten quiet minutes only): after a server restart
// the hub controller's status subscription came back 20–83 s later and its publishing connections one by one
// over almost two minutes. Here the wait grows with how long the server has been away, not with how many
// clients noticed: a client reconnects soon after a short outage, and at most MaxDelay after the server is
// back from a long one. It also restarts a client that sdk-go left stuck on a closed connection (OnStuck), and
// keeps sdk-go's retries of a subscription a client holds out of the logs.
package reconnect

import (
	"math/rand/v2"
	"sync"
	"time"

	"open-cluster-management.io/sdk-go/pkg/cloudevents/generic/clients"
)

const (
	// MinDelay is the wait right after the server went away.
	MinDelay = 250 * time.Millisecond
	// MaxDelay bounds the wait: how long a client may stay away once its server is back.
	MaxDelay = 3 * time.Second
)

// Backoff computes the waits of all the clients of a process. The zero value is ready to use.
type Backoff struct {
	mu sync.Mutex
	// since is when the current outage began: the first wait asked for after a quiet spell; last is the
	// latest wait asked for.
	since, last time.Time
}

// Delay returns how long a client waits before it tries again: half as long as the outage has lasted so
// far, between MinDelay and MaxDelay, less up to half of that at random so that the clients of many
// processes do not all come back at the same instant. Waits asked for more than twice MaxDelay apart
// belong to different outages.
func (b *Backoff) Delay(now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.last.IsZero() || now.Sub(b.last) > 2*MaxDelay {
		b.since = now
	}
	b.last = now
	d := min(max(now.Sub(b.since)/2, MinDelay), MaxDelay)
	return d - rand.N(d/2) //nolint:gosec // jitter, not a secret
}

var (
	process     Backoff
	installOnce sync.Once
)

// Install makes the sdk-go CloudEvents clients of the process reconnect on one Backoff, and watches the
// clients built with OnStuck's context. Call it before the first client is created: a command's Run does.
func Install() {
	installOnce.Do(func() {
		clients.DelayFn = func() time.Duration { return process.Delay(time.Now()) }
		installErrorHandlers()
	})
}
