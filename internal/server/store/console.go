package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"k8s.io/klog/v2"
)

// consoleChannel is the LISTEN/NOTIFY channel of the console's relay: "<instance>:<relay row id>".
const consoleChannel = "argocd_pull_console"

// ConsoleRelay is what the console needs of the database: which instance holds a cluster's console stream, and
// a channel between instances for the requests and answers of the clusters they do not hold.
type ConsoleRelay interface {
	// HoldConsole records this instance as the holder of a cluster's console stream; ReleaseConsole forgets
	// it, if this instance still holds it.
	HoldConsole(ctx context.Context, cluster string) error
	ReleaseConsole(ctx context.Context, cluster string) error
	// ConsoleHolder is the live instance (heartbeat within timeout) that holds a cluster's stream, "" for none.
	ConsoleHolder(ctx context.Context, cluster string, timeout time.Duration) (string, error)
	// SendConsole sends a message to another instance.
	SendConsole(ctx context.Context, to string, body []byte) error
	// ListenConsole delivers this instance's messages, in the order they were sent, until ctx ends,
	// reconnecting as needed.
	ListenConsole(ctx context.Context, onMessage func(ctx context.Context, body []byte)) error
	// SweepConsole forgets the sessions of instances that are gone and messages older than maxAge.
	SweepConsole(ctx context.Context, maxAge time.Duration) error
}

var _ ConsoleRelay = (*pgStore)(nil)

func (s *pgStore) HoldConsole(ctx context.Context, cluster string) (err error) {
	ctx, end := s.begin(ctx, "console_hold", &err)
	defer end()
	_, err = s.pool.Exec(ctx, `INSERT INTO console_sessions (cluster, instance_id) VALUES ($1, $2)
		ON CONFLICT (cluster) DO UPDATE SET instance_id = EXCLUDED.instance_id, connected_at = now()`, cluster, s.instance)
	if err != nil {
		return fmt.Errorf("record the console session of %s: %w", cluster, err)
	}
	return nil
}

func (s *pgStore) ReleaseConsole(ctx context.Context, cluster string) (err error) {
	ctx, end := s.begin(ctx, "console_release", &err)
	defer end()
	if _, err = s.pool.Exec(ctx, "DELETE FROM console_sessions WHERE cluster = $1 AND instance_id = $2", cluster, s.instance); err != nil {
		return fmt.Errorf("forget the console session of %s: %w", cluster, err)
	}
	return nil
}

func (s *pgStore) ConsoleHolder(ctx context.Context, cluster string, timeout time.Duration) (id string, err error) {
	ctx, end := s.begin(ctx, "console_holder", &err)
	defer end()
	err = s.pool.QueryRow(ctx, `SELECT s.instance_id FROM console_sessions s JOIN server_instances i ON i.id = s.instance_id
		WHERE s.cluster = $1 AND i.heartbeat_at > now() - ($2 * interval '1 millisecond')`, cluster, timeout.Milliseconds()).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("find the console session of %s: %w", cluster, err)
	}
	return id, nil
}

func (s *pgStore) SendConsole(ctx context.Context, to string, body []byte) (err error) {
	ctx, end := s.begin(ctx, "console_send", &err)
	defer end()
	_, err = s.pool.Exec(ctx, `WITH m AS (INSERT INTO console_relay (to_instance, body) VALUES ($1, $2) RETURNING id)
		SELECT pg_notify($3, $1 || ':' || id) FROM m`, to, body, consoleChannel)
	if err != nil {
		return fmt.Errorf("relay a console message to %s: %w", to, err)
	}
	return nil
}

func (s *pgStore) ListenConsole(ctx context.Context, onMessage func(ctx context.Context, body []byte)) error {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.listenConsoleOnce(ctx, onMessage)
		if ctx.Err() != nil {
			break
		}
		klog.FromContext(ctx).V(1).Info("Console relay feed lost; reconnecting", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxListenBackoff)
	}
	return nil
}

func (s *pgStore) listenConsoleOnce(ctx context.Context, onMessage func(ctx context.Context, body []byte)) error {
	conn, err := pgx.Connect(ctx, s.url)
	if err != nil {
		return fmt.Errorf("connect for the console relay: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, "LISTEN "+consoleChannel); err != nil {
		return fmt.Errorf("listen for the console relay: %w", err)
	}
	// Messages written while this instance was not listening are taken first, in order.
	if err := s.takeConsole(ctx, conn, 0, onMessage); err != nil {
		return err
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("wait for a console relay message: %w", err)
		}
		to, idText, ok := strings.Cut(n.Payload, ":")
		if !ok || to != s.instance {
			continue
		}
		id, err := strconv.ParseInt(idText, 10, 64)
		if err != nil {
			continue
		}
		if err := s.takeConsole(ctx, conn, id, onMessage); err != nil {
			return err
		}
	}
}

// takeConsole takes this instance's messages up to id (all of them when id is 0), oldest first.
func (s *pgStore) takeConsole(ctx context.Context, conn *pgx.Conn, id int64, onMessage func(ctx context.Context, body []byte)) error {
	query := "DELETE FROM console_relay WHERE to_instance = $1 AND ($2 = 0 OR id <= $2) RETURNING id, body"
	rows, err := conn.Query(ctx, query, s.instance, id)
	if err != nil {
		return fmt.Errorf("take console relay messages: %w", err)
	}
	type message struct {
		id   int64
		body []byte
	}
	messages, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (message, error) {
		var m message
		return m, r.Scan(&m.id, &m.body)
	})
	if err != nil {
		return fmt.Errorf("take console relay messages: %w", err)
	}
	slices.SortFunc(messages, func(a, b message) int { return cmp.Compare(a.id, b.id) })
	for _, m := range messages {
		onMessage(ctx, m.body)
	}
	return nil
}

func (s *pgStore) SweepConsole(ctx context.Context, maxAge time.Duration) (err error) {
	ctx, end := s.begin(ctx, "console_sweep", &err)
	defer end()
	if _, err = s.pool.Exec(ctx, "DELETE FROM console_sessions WHERE instance_id NOT IN (SELECT id FROM server_instances)"); err != nil {
		return fmt.Errorf("sweep console sessions: %w", err)
	}
	if _, err = s.pool.Exec(ctx, "DELETE FROM console_relay WHERE created_at < now() - ($1 * interval '1 millisecond')", maxAge.Milliseconds()); err != nil {
		return fmt.Errorf("sweep console relay messages: %w", err)
	}
	return nil
}
