package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"k8s.io/klog/v2"
)

//go:embed migrations/*.sql
var migrations embed.FS

// notifyChannel is the LISTEN/NOTIFY channel every instance of one database shares.
const notifyChannel = "argocd_pull_server"

// migrationLockKey serialises migrations of instances starting together.
const migrationLockKey = 0x6172676f70756c6c // "argopull"

// Observer receives the duration of each database operation.
type Observer func(op string, d time.Duration, err error)

// Config configures a PostgreSQL store.
type Config struct {
	// URL is a PostgreSQL connection string.
	URL string
	// MaxConns is the size of the connection pool.
	MaxConns int32
	// InstanceID names this server instance in notifications and in the instance table.
	InstanceID string
	// Observe, when set, receives the duration of every operation.
	Observe Observer
}

type pgStore struct {
	pool     *pgxpool.Pool
	url      string
	instance string
	observe  Observer

	mu sync.Mutex
	// abort ends with the operations begun before the last abortInFlight.
	abort       context.Context
	cancelAbort context.CancelFunc
}

var _ Store = (*pgStore)(nil)

// New connects to PostgreSQL. The pool connects lazily, so a database that is down at start is retried.
func New(ctx context.Context, cfg Config) (Store, error) {
	poolCfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if cfg.MaxConns > 0 {
		poolCfg.MaxConns = cfg.MaxConns
	}
	poolCfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	// The server tells a client its event is stored only once the commit is durable: a database that runs
	// with synchronous_commit=off would lose acknowledged specs and statuses when it crashes. A connection
	// string that sets synchronous_commit itself keeps its choice.
	if _, set := poolCfg.ConnConfig.RuntimeParams["synchronous_commit"]; !set {
		poolCfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	}
	poolCfg.ShouldPing = pingIdle
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, fmt.Errorf("create database pool: %w", err)
	}
	observe := cfg.Observe
	if observe == nil {
		observe = func(string, time.Duration, error) {}
	}
	abort, cancelAbort := context.WithCancel(context.Background())
	return &pgStore{pool: pool, url: cfg.URL, instance: cfg.InstanceID, observe: observe, abort: abort, cancelAbort: cancelAbort}, nil
}

// pingIdle checks a pooled connection idle for more than a second before it is used, as pgxpool does by
// default, but within pingTimeout: a connection that a network fault left dead would otherwise hold its
// caller for as long as the caller's context lasts. A ping that fails closes the connection; the pool's own
// ping that follows then fails at once and the pool drops it.
func pingIdle(ctx context.Context, p pgxpool.ShouldPingParams) bool {
	if p.IdleDuration <= time.Second {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	return p.Conn.Ping(pctx) != nil
}

func (s *pgStore) Close() {
	s.pool.Close()
	s.mu.Lock()
	s.cancelAbort()
	s.mu.Unlock()
}

func (s *pgStore) Ping(ctx context.Context) (err error) {
	ctx, end := s.begin(ctx, "ping", &err)
	defer end()
	if err = s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping database: %w", err)
	}
	return nil
}

// inTx runs fn on a pooled connection. fn begins and commits the transaction itself, so that BEGIN and
// COMMIT travel with other statements in pipelined batches instead of taking round trips of their own; a
// transaction fn leaves open is rolled back (or its connection dropped).
func (s *pgStore) inTx(ctx context.Context, fn func(conn *pgx.Conn) error) error {
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire a database connection: %w", err)
	}
	defer pc.Release()
	err = fn(pc.Conn())
	if pc.Conn().PgConn().TxStatus() != 'I' && !pc.Conn().IsClosed() {
		// On failure the pool drops the connection, which ends the transaction too.
		_, _ = pc.Conn().Exec(context.WithoutCancel(ctx), "ROLLBACK")
	}
	return err
}

// timed starts timing an operation; the returned function, deferred, reports it with the error *err holds.
// maxOperation bounds every database operation: far more than any takes at 150,000 works (a batch of 500
// writes, a page of 1,000 bundles), and a query on a connection that a network fault left dead without a reset
// waits no longer than that. An operation that reaches it ends the others in flight too (abortInFlight): the
// database did not answer on a connection that had worked, and the connections the same fault broke are found
// at once, not each at its own deadline. (A silent partition that the notification feed's connection did not
// notice left an instance's pooled connections dead until their operations' deadlines.)
const maxOperation = 10 * time.Second

// begin starts a database operation: its context ends after maxOperation, or at once when the database is found
// unreachable (abortInFlight), so that queries on connections that the same fault broke fail instead of
// waiting. end records the operation's duration and error.
func (s *pgStore) begin(ctx context.Context, op string, err *error) (context.Context, func()) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, maxOperation)
	s.mu.Lock()
	abort := s.abort
	s.mu.Unlock()
	stop := context.AfterFunc(abort, cancel)
	return ctx, func() {
		stop()
		timedOut := *err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) && time.Since(start) >= maxOperation
		cancel()
		s.observe(op, time.Since(start), *err)
		if timedOut {
			s.abortInFlight()
		}
	}
}

// abortInFlight ends every operation in flight and drops the pool's connections: the database did not answer
// on a connection that was working, so a network fault most likely broke them all. Operations begun from now
// on connect afresh.
func (s *pgStore) abortInFlight() {
	s.mu.Lock()
	s.cancelAbort()
	s.abort, s.cancelAbort = context.WithCancel(context.Background())
	s.mu.Unlock()
	s.pool.Reset()
}

// Migrate applies the embedded migrations in name order, each in its own transaction, under an advisory
// lock so that instances starting together do not race.
func (s *pgStore) Migrate(ctx context.Context) error {
	names, err := migrationNames()
	if err != nil {
		return err
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire connection for migrations: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(migrationLockKey)); err != nil {
		return fmt.Errorf("lock migrations: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(migrationLockKey))
	}()
	if err := s.applyMigration(ctx, conn.Conn(), names[0]); err != nil {
		return err
	}
	applied, err := appliedMigrations(ctx, conn.Conn())
	if err != nil {
		return err
	}
	for _, name := range names[1:] {
		if applied[name] {
			continue
		}
		if err := s.applyMigration(ctx, conn.Conn(), name); err != nil {
			return err
		}
		klog.FromContext(ctx).Info("Applied database migration", "migration", name)
	}
	return nil
}

func migrationNames() ([]string, error) {
	entries, err := fs.ReadDir(migrations, "migrations")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	if len(names) == 0 {
		return nil, errors.New("no embedded migrations")
	}
	return names, nil
}

func appliedMigrations(ctx context.Context, conn *pgx.Conn) (map[string]bool, error) {
	rows, err := conn.Query(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("list applied migrations: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list applied migrations: %w", err)
	}
	applied := make(map[string]bool, len(versions))
	for _, v := range versions {
		applied[v] = true
	}
	return applied, nil
}

func (s *pgStore) applyMigration(ctx context.Context, conn *pgx.Conn, name string) error {
	body, err := migrations.ReadFile("migrations/" + name)
	if err != nil {
		return fmt.Errorf("read migration %s: %w", name, err)
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, string(body)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version) VALUES ($1) ON CONFLICT DO NOTHING",
			strings.TrimSpace(name))
		return err
	})
	if err != nil {
		return fmt.Errorf("apply migration %s: %w", name, err)
	}
	return nil
}

// pgCode returns the SQLSTATE of a PostgreSQL error, or "".
func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// SQLSTATE codes the store classifies.
const (
	codeUniqueViolation     = "23505"
	codeForeignKeyViolation = "23503"
)
