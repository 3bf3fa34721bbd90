package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

func (s *pgStore) RegisterInstance(ctx context.Context) (err error) {
	ctx, end := s.begin(ctx, "register_instance", &err)
	defer end()
	_, err = s.pool.Exec(ctx, `INSERT INTO server_instances (id) VALUES ($1)
		ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()`, s.instance)
	if err != nil {
		return fmt.Errorf("register server instance %s: %w", s.instance, err)
	}
	return nil
}

func (s *pgStore) Heartbeat(ctx context.Context) (err error) {
	ctx, end := s.begin(ctx, "heartbeat", &err)
	defer end()
	tag, err := s.pool.Exec(ctx, "UPDATE server_instances SET heartbeat_at = now() WHERE id = $1", s.instance)
	if err != nil {
		return fmt.Errorf("heartbeat server instance %s: %w", s.instance, err)
	}
	if tag.RowsAffected() == 0 {
		// Another instance reaped this one while it could not reach the database: come back.
		return s.RegisterInstance(ctx)
	}
	return nil
}

func (s *pgStore) RemoveInstance(ctx context.Context) (err error) {
	ctx, end := s.begin(ctx, "remove_instance", &err)
	defer end()
	if _, err = s.pool.Exec(ctx, "DELETE FROM server_instances WHERE id = $1", s.instance); err != nil {
		return fmt.Errorf("remove server instance %s: %w", s.instance, err)
	}
	return nil
}

func (s *pgStore) IsLeader(ctx context.Context, timeout time.Duration) (leader bool, err error) {
	ctx, end := s.begin(ctx, "leader", &err)
	defer end()
	var id string
	err = s.pool.QueryRow(ctx, `SELECT id FROM server_instances WHERE heartbeat_at > now() - ($1 * interval '1 millisecond')
		ORDER BY started_at, id LIMIT 1`, timeout.Milliseconds()).Scan(&id)
	if err == pgx.ErrNoRows {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("find the leading server instance: %w", err)
	}
	return id == s.instance, nil
}

func (s *pgStore) ReapInstances(ctx context.Context, timeout time.Duration) (ids []string, err error) {
	ctx, end := s.begin(ctx, "reap_instances", &err)
	defer end()
	rows, err := s.pool.Query(ctx, "DELETE FROM server_instances WHERE heartbeat_at < now() - ($1 * interval '1 millisecond') RETURNING id", timeout.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("reap server instances: %w", err)
	}
	ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("reap server instances: %w", err)
	}
	return ids, nil
}

func (s *pgStore) LiveInstances(ctx context.Context, timeout time.Duration) (n int, err error) {
	ctx, end := s.begin(ctx, "live_instances", &err)
	defer end()
	err = s.pool.QueryRow(ctx, "SELECT count(*) FROM server_instances WHERE heartbeat_at > now() - ($1 * interval '1 millisecond')", timeout.Milliseconds()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count server instances: %w", err)
	}
	return n, nil
}

// The sweep's queries over resources. Each runs every sweep on every server, so each reads an index that holds
// the rows it looks for (resources_undelivered_idx, resources_undelivered_age_idx, resources_deleting_idx) and
// never the whole table; TestSweepQueriesUseIndexes holds them to that.
const (
	republishUndeliveredQuery = `UPDATE resources SET published_at = now(), republish_count = republish_count + 1
		WHERE id IN (SELECT id FROM resources
			WHERE (status_version IS NULL OR status_version <> version) AND published_at < now() - ($1 * interval '1 millisecond')
			ORDER BY published_at LIMIT $2 FOR UPDATE SKIP LOCKED)
		RETURNING id, consumer_name, version`
	countUndeliveredQuery = `SELECT count(*) FROM resources
		WHERE (status_version IS NULL OR status_version <> version) AND updated_at < now() - ($1 * interval '1 millisecond')`
	countStuckDeletesQuery = `SELECT count(*) FROM resources WHERE deleted_at < now() - ($1 * interval '1 millisecond')`
	listStuckDeletesQuery  = `SELECT id, consumer_name, source, deleted_at FROM resources
		WHERE deleted_at < now() - ($1 * interval '1 millisecond') ORDER BY deleted_at LIMIT $2`
)

func (s *pgStore) RepublishUndelivered(ctx context.Context, olderThan time.Duration, limit int) (list []Republished, err error) {
	ctx, end := s.begin(ctx, "republish_undelivered", &err)
	defer end()
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, republishUndeliveredQuery, olderThan.Milliseconds(), limit)
		if err != nil {
			return err
		}
		list, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Republished, error) {
			var p Republished
			return p, r.Scan(&p.ID, &p.Consumer, &p.Version)
		})
		if err != nil {
			return err
		}
		notes := make([]Notification, 0, len(list))
		for _, p := range list {
			notes = append(notes, Notification{Kind: KindSpec, ID: p.ID, Consumer: p.Consumer, Version: p.Version})
		}
		return s.notify(ctx, tx, notes)
	})
	if err != nil {
		return nil, fmt.Errorf("republish undelivered specs: %w", err)
	}
	return list, nil
}

func (s *pgStore) CountUndelivered(ctx context.Context, olderThan time.Duration) (n int, err error) {
	ctx, end := s.begin(ctx, "count_undelivered", &err)
	defer end()
	err = s.pool.QueryRow(ctx, countUndeliveredQuery, olderThan.Milliseconds()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count undelivered specs: %w", err)
	}
	return n, nil
}

func (s *pgStore) StuckDeletes(ctx context.Context, olderThan time.Duration, limit int) (n int, list []StuckDelete, err error) {
	ctx, end := s.begin(ctx, "stuck_deletes", &err)
	defer end()
	err = s.pool.QueryRow(ctx, countStuckDeletesQuery, olderThan.Milliseconds()).Scan(&n)
	if err != nil {
		return 0, nil, fmt.Errorf("count stuck deletes: %w", err)
	}
	rows, err := s.pool.Query(ctx, listStuckDeletesQuery, olderThan.Milliseconds(), limit)
	if err != nil {
		return 0, nil, fmt.Errorf("list stuck deletes: %w", err)
	}
	list, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (StuckDelete, error) {
		var d StuckDelete
		return d, r.Scan(&d.ID, &d.Consumer, &d.Source, &d.DeletedAt)
	})
	if err != nil {
		return 0, nil, fmt.Errorf("list stuck deletes: %w", err)
	}
	return n, list, nil
}
