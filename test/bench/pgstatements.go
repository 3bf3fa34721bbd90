package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
)

// postgresStatementSettings load pg_stat_statements into a run's PostgreSQL (-pprof, Maestro mode): the
// statements' execution times are PostgreSQL's profile, as pprof's are the Go processes'.
var postgresStatementSettings = []string{"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=all"}

// statementsShown is how many statements a phase's summary lists, the most expensive first.
const statementsShown = 25

// enableStatements creates the pg_stat_statements view in the database at url.
func enableStatements(ctx context.Context, url string) error {
	return withPostgres(ctx, url, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
		return err
	})
}

// resetStatements starts a phase's statement statistics afresh.
func (p *profiler) resetStatements(ctx context.Context) {
	if p == nil || p.postgres == "" {
		return
	}
	err := withPostgres(ctx, p.postgres, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "SELECT pg_stat_statements_reset()")
		return err
	})
	if err != nil {
		p.log("pg_stat_statements: reset: %v", err)
	}
}

// writeStatements writes <phase>-postgres-statements.txt: the phase's statements by total execution time, with
// their calls, rows, the buffers they touched and the WAL they wrote, and the totals of all statements.
func (p *profiler) writeStatements(ctx context.Context, phase string) {
	if p == nil || p.postgres == "" {
		return
	}
	var b strings.Builder
	err := withPostgres(ctx, p.postgres, func(ctx context.Context, conn *pgx.Conn) error {
		var calls, rows int64
		var total float64
		if err := conn.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint, coalesce(sum(total_exec_time), 0),
			coalesce(sum(rows), 0)::bigint FROM pg_stat_statements`).Scan(&calls, &total, &rows); err != nil {
			return err
		}
		fmt.Fprintf(&b, "phase %s: %d statements executed, %d rows, %.1f s of execution in all\n\n", phase, calls, rows, total/1000)
		r, err := conn.Query(ctx, `SELECT calls, total_exec_time, mean_exec_time, rows, shared_blks_hit + shared_blks_read,
			wal_bytes::bigint, regexp_replace(query, '\s+', ' ', 'g')
			FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT $1`, statementsShown)
		if err != nil {
			return err
		}
		defer r.Close()
		w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		if _, err := fmt.Fprintln(w, "total s\tshare\tcalls\tmean ms\trows\tbuffers\tWAL KiB\t statement"); err != nil {
			return err
		}
		for r.Next() {
			var n, rws, blks, wal int64
			var tot, mean float64
			var query string
			if err := r.Scan(&n, &tot, &mean, &rws, &blks, &wal, &query); err != nil {
				return err
			}
			if len(query) > 160 {
				query = query[:160] + "…"
			}
			if _, err := fmt.Fprintf(w, "%.2f\t%.1f %%\t%d\t%.3f\t%d\t%d\t%d\t %s\n",
				tot/1000, 100*tot/max(total, 1e-9), n, mean, rws, blks, wal/1024, query); err != nil {
				return err
			}
		}
		if err := r.Err(); err != nil {
			return err
		}
		return w.Flush()
	})
	if err != nil {
		p.log("pg_stat_statements: %s: %v", phase, err)
		return
	}
	if err := os.WriteFile(filepath.Join(p.dir, phase+"-postgres-statements.txt"), []byte(b.String()), 0o600); err != nil {
		p.log("pg_stat_statements: %v", err)
	}
}

// withPostgres runs f on a connection of its own to the database at url, connection and f bounded together.
func withPostgres(ctx context.Context, url string, f func(context.Context, *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	return f(ctx, conn)
}
