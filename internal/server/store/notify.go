package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"k8s.io/klog/v2"
)

// maxNotifyPayload stays under PostgreSQL's 8000-byte NOTIFY limit.
const maxNotifyPayload = 7800

// envelope is one NOTIFY payload: notifications from one instance.
type envelope struct {
	Instance string         `json:"i"`
	Items    []Notification `json:"n"`
}

// notifyPayloads packs notifications into as few payloads as fit the NOTIFY limit.
func notifyPayloads(instance string, notes []Notification) ([]string, error) {
	var payloads []string
	var batch []Notification
	size := 0
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		b, err := json.Marshal(envelope{Instance: instance, Items: batch})
		if err != nil {
			return fmt.Errorf("encode notification: %w", err)
		}
		payloads = append(payloads, string(b))
		batch, size = nil, 0
		return nil
	}
	overhead := len(instance) + 16
	for _, n := range notes {
		b, err := json.Marshal(n)
		if err != nil {
			return nil, fmt.Errorf("encode notification for %s: %w", n.ID, err)
		}
		if len(b)+overhead > maxNotifyPayload {
			return nil, fmt.Errorf("notification for %s does not fit a NOTIFY payload", n.ID)
		}
		if size+len(b)+1+overhead > maxNotifyPayload {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		batch = append(batch, n)
		size += len(b) + 1
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return payloads, nil
}

// queueNotify queues the notifications of a transaction; PostgreSQL delivers them when it commits.
func (s *pgStore) queueNotify(b *pgx.Batch, notes []Notification) error {
	if len(notes) == 0 {
		return nil
	}
	payloads, err := notifyPayloads(s.instance, notes)
	if err != nil {
		return err
	}
	b.Queue("SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p", notifyChannel, payloads)
	return nil
}

// notify sends the notifications in a transaction.
func (s *pgStore) notify(ctx context.Context, tx pgx.Tx, notes []Notification) error {
	b := &pgx.Batch{}
	if err := s.queueNotify(b, notes); err != nil {
		return err
	}
	if b.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("notify %d changes: %w", len(notes), err)
	}
	return nil
}

// maxListenBackoff bounds the wait between two attempts to reconnect the notification feed, and so how long
// after the database is back the feed may stay away.
const maxListenBackoff = 2 * time.Second

func (s *pgStore) Listen(ctx context.Context, onConnect func(ctx context.Context), onNotify func(ctx context.Context, n []Notification)) error {
	logger := klog.FromContext(ctx)
	backoff := 100 * time.Millisecond
	logged := ""
	for ctx.Err() == nil {
		connected, err := s.listenOnce(ctx, onConnect, onNotify)
		if ctx.Err() != nil {
			break
		}
		if connected {
			backoff, logged = 100*time.Millisecond, ""
		}
		// Once per outage (and when the reason changes), not at every attempt.
		if err.Error() != logged {
			logged = err.Error()
			logger.Error(err, "Lost the database notification feed; reconnecting")
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxListenBackoff)
	}
	return nil
}

// listenOnce holds one LISTEN connection until it fails; connected reports whether it got as far as
// listening. A connection that a network fault left dead without a reset is never told: after feedIdle
// without a notification it is pinged, and one that does not answer within pingTimeout is given up, as are
// the operations in flight and the pool's connections, which the same fault most likely broke.
func (s *pgStore) listenOnce(ctx context.Context, onConnect func(ctx context.Context), onNotify func(ctx context.Context, n []Notification)) (connected bool, err error) {
	connectCtx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conn, err := pgx.Connect(connectCtx, s.url)
	if err != nil {
		return false, fmt.Errorf("connect for notifications: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(connectCtx, "LISTEN "+notifyChannel); err != nil {
		return false, fmt.Errorf("listen for notifications: %w", err)
	}
	onConnect(ctx)
	for {
		n, err := waitForNotification(ctx, conn)
		if err != nil {
			if errors.Is(err, errFeedSilent) {
				s.abortInFlight()
			}
			return true, err
		}
		var env envelope
		if err := json.Unmarshal([]byte(n.Payload), &env); err != nil {
			klog.FromContext(ctx).Error(err, "Ignoring a malformed notification", "payload", n.Payload)
			continue
		}
		if env.Instance != s.instance {
			onNotify(ctx, env.Items)
		}
	}
}

// How the notification feed checks its connection.
const (
	// feedIdle is how long the feed waits for a notification before it pings its connection.
	feedIdle = 5 * time.Second
	// pingTimeout bounds a ping, here and before a pooled connection idle for a while is used.
	pingTimeout = 2 * time.Second
	// connectTimeout bounds a connection attempt of the feed.
	connectTimeout = 10 * time.Second
)

// errFeedSilent is the error of a feed connection that does not answer a ping.
var errFeedSilent = errors.New("the notification feed's connection does not answer")

// waitForNotification waits for the next notification, pinging the connection whenever none came for feedIdle.
func waitForNotification(ctx context.Context, conn *pgx.Conn) (*pgconn.Notification, error) {
	for {
		wctx, cancel := context.WithTimeout(ctx, feedIdle)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			return n, nil
		case ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded):
			return nil, fmt.Errorf("wait for notification: %w", err)
		}
		pctx, cancel := context.WithTimeout(ctx, pingTimeout)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%w within %s: %v", errFeedSilent, pingTimeout, err)
		}
	}
}
