package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// errRetry asks ApplySpecs to run its transaction again: a row it meant to create appeared meanwhile.
var errRetry = errors.New("resource created concurrently")

// specState is what the decision needs of a stored row; it is updated in memory as a batch is decided, so
// that several writes to one resource in a batch see each other.
type specState struct {
	exists      bool
	consumer    string
	source      string
	version     int64
	hash        string
	deletedAt   *time.Time
	undelivered bool
	// upsert holds the row to write when a create or update changed it in this batch.
	upsert *SpecRow
	// created is set when the row did not exist before this batch.
	created bool
	// deleteVersion is set when a delete marked the row in this batch.
	deleteVersion int64
}

// decideSpec applies one write to the state of its row and says what to send. It is the whole of the
// protocol's spec rules: version checks, ownership, deletion marks and idempotent resends.
func decideSpec(w SpecWrite, st *specState, consumerKnown bool, now time.Time) SpecResult {
	if !st.exists && !consumerKnown && w.Op != OpDelete {
		return SpecResult{Err: fmt.Errorf("%w: consumer %s of resource %s", ErrConsumerNotFound, w.Consumer, w.ID)}
	}
	if st.exists && st.source != w.Source {
		return SpecResult{Err: fmt.Errorf("%w: resource %s belongs to another source", ErrForbidden, w.ID)}
	}
	if st.exists && st.consumer != w.Consumer {
		return SpecResult{Err: fmt.Errorf("%w: resource %s belongs to consumer %s, not %s", ErrInvalid, w.ID, st.consumer, w.Consumer)}
	}
	if w.Op == OpDelete {
		return decideDelete(w, st, now)
	}
	return decideUpsert(w, st)
}

func decideDelete(w SpecWrite, st *specState, now time.Time) SpecResult {
	if !st.exists {
		return SpecResult{Gone: true, Row: SpecRow{ID: w.ID, Consumer: w.Consumer, Source: w.Source}}
	}
	// A delete is taken at any version, as Maestro takes it: it is the source's last word on a resource only
	// that source writes, and an older version only says that the source's cache missed the answer to a
	// change the server took (its connection was cut meanwhile). Refused, the delete would fail until that
	// cache learnt the version some other way. Nothing can undo it: a later change of the resource is refused
	// while it is being deleted.
	row := SpecRow{ID: w.ID, Consumer: st.consumer, Source: st.source, Name: w.Name, Meta: w.Meta}
	if st.deletedAt != nil {
		row.Version, row.DeletedAt = st.version, st.deletedAt
		return SpecResult{Send: st.undelivered, Row: row}
	}
	// A delete is a new version, so that an update still in flight can never undo it on the agent.
	st.version = max(st.version+1, w.Version)
	st.deletedAt = &now
	st.deleteVersion = st.version
	st.undelivered = true
	row.Version, row.DeletedAt = st.version, st.deletedAt
	return SpecResult{Send: true, Row: row}
}

func decideUpsert(w SpecWrite, st *specState) SpecResult {
	row := SpecRow{ID: w.ID, Consumer: w.Consumer, Source: w.Source, Name: w.Name, Meta: w.Meta, Spec: w.Spec}
	if !st.exists {
		if w.Op == OpUpdate {
			return SpecResult{Err: fmt.Errorf("%w: resource %s", ErrNotFound, w.ID)}
		}
		row.Version = max(w.Version, 1)
		*st = specState{exists: true, consumer: w.Consumer, source: w.Source, version: row.Version, hash: w.Hash,
			undelivered: true, upsert: &row, created: true}
		return SpecResult{Send: true, Row: row}
	}
	if st.deletedAt != nil {
		return SpecResult{Err: fmt.Errorf("%w: resource %s", ErrDeleting, w.ID)}
	}
	if w.Hash == st.hash {
		row.Version = st.version
		return SpecResult{Send: st.undelivered, Row: row}
	}
	switch {
	case w.Version == 0:
		row.Version = st.version + 1
	case w.Version <= st.version:
		return SpecResult{Err: fmt.Errorf("%w: resource %s changed at version %d, stored version is %d", ErrStale, w.ID, w.Version, st.version)}
	default:
		row.Version = w.Version
	}
	st.version, st.hash, st.undelivered, st.upsert = row.Version, w.Hash, true, &row
	return SpecResult{Send: true, Row: row}
}

func (s *pgStore) ApplySpecs(ctx context.Context, writes []SpecWrite, autoRegister bool) (results []SpecResult, err error) {
	ctx, end := s.begin(ctx, "apply_specs", &err)
	defer end()
	for attempt := 0; ; attempt++ {
		results, err = s.applySpecsOnce(ctx, writes, autoRegister)
		if !errors.Is(err, errRetry) || attempt == 3 {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("apply %d spec events: %w", len(writes), err)
	}
	return results, nil
}

// applySpecsOnce decides and writes a batch in one transaction of three round trips: BEGIN with the
// consumer lookup and the row locks, then the writes and the notifications, then COMMIT once their
// results are checked.
func (s *pgStore) applySpecsOnce(ctx context.Context, writes []SpecWrite, autoRegister bool) ([]SpecResult, error) {
	results := make([]SpecResult, len(writes))
	err := s.inTx(ctx, func(conn *pgx.Conn) error {
		names := consumerNames(writes)
		known := make(map[string]bool, len(names))
		states, order := newSpecStates(writes)
		read := &pgx.Batch{}
		read.Queue("BEGIN")
		if autoRegister {
			read.Queue(`INSERT INTO consumers (id, name)
				SELECT gen_random_uuid()::text, n FROM unnest($1::text[]) AS n ORDER BY n
				ON CONFLICT (name) DO NOTHING`, names)
		}
		read.Queue("SELECT name FROM consumers WHERE name = ANY($1)", names).Query(func(rows pgx.Rows) error {
			found, err := pgx.CollectRows(rows, pgx.RowTo[string])
			for _, n := range found {
				known[n] = true
			}
			return err
		})
		read.Queue(`SELECT id, consumer_name, source, version, spec_hash, deleted_at,
				status_version IS DISTINCT FROM version
			FROM resources WHERE id = ANY($1) ORDER BY id FOR UPDATE`, order).Query(func(rows pgx.Rows) error {
			return scanSpecStates(rows, states)
		})
		if err := conn.SendBatch(ctx, read).Close(); err != nil {
			return fmt.Errorf("look up consumers and lock resources: %w", err)
		}
		now := time.Now()
		var notes []Notification
		for i, w := range writes {
			results[i] = decideSpec(w, states[w.ID], known[w.Consumer], now)
			notes = append(notes, specNotification(results[i])...)
		}
		write := &pgx.Batch{}
		queueSpecWrites(write, states, order)
		if err := s.queueNotify(write, notes); err != nil {
			return err
		}
		err := conn.SendBatch(ctx, write).Close()
		switch {
		case errors.Is(err, errRetry):
			return err
		case pgCode(err) == codeForeignKeyViolation:
			return fmt.Errorf("%w: a consumer was deleted while its resources were being created", ErrConsumerNotFound)
		case err != nil:
			return fmt.Errorf("write resources: %w", err)
		}
		if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		return nil
	})
	return results, err
}

func specNotification(r SpecResult) []Notification {
	switch {
	case r.Err != nil:
		return nil
	case r.Gone:
		return []Notification{{Kind: KindRemoved, ID: r.Row.ID, Consumer: r.Row.Consumer, Source: r.Row.Source}}
	case r.Send:
		return []Notification{{Kind: KindSpec, ID: r.Row.ID, Consumer: r.Row.Consumer, Version: r.Row.Version}}
	}
	return nil
}

// consumerNames returns the consumers the writes name, each once.
func consumerNames(writes []SpecWrite) []string {
	names := make([]string, 0, len(writes))
	seen := map[string]bool{}
	for _, w := range writes {
		if !seen[w.Consumer] {
			seen[w.Consumer] = true
			names = append(names, w.Consumer)
		}
	}
	return names
}

// newSpecStates returns an empty state for every resource the writes name, and the ids in first-seen order.
// The rows are locked in id order, so that concurrent batches cannot deadlock.
func newSpecStates(writes []SpecWrite) (map[string]*specState, []string) {
	states := make(map[string]*specState, len(writes))
	order := make([]string, 0, len(writes))
	for _, w := range writes {
		if _, ok := states[w.ID]; !ok {
			states[w.ID] = &specState{}
			order = append(order, w.ID)
		}
	}
	return states, order
}

// scanSpecStates fills the states of the locked rows.
func scanSpecStates(rows pgx.Rows, states map[string]*specState) error {
	for rows.Next() {
		var id string
		st := specState{exists: true}
		if err := rows.Scan(&id, &st.consumer, &st.source, &st.version, &st.hash, &st.deletedAt, &st.undelivered); err != nil {
			return err
		}
		*states[id] = st
	}
	return rows.Err()
}

// queueSpecWrites queues what the decisions changed: new rows, updated specs, deletion marks.
func queueSpecWrites(b *pgx.Batch, states map[string]*specState, order []string) {
	var inserts, updates []*SpecRow
	var hashes, updateHashes []string
	var delIDs []string
	var delVersions []int64
	for _, id := range order {
		st := states[id]
		switch {
		case st.upsert != nil && st.created:
			inserts, hashes = append(inserts, st.upsert), append(hashes, st.hash)
		case st.upsert != nil:
			updates, updateHashes = append(updates, st.upsert), append(updateHashes, st.hash)
		}
		if st.deleteVersion != 0 {
			delIDs, delVersions = append(delIDs, id), append(delVersions, st.deleteVersion)
		}
	}
	queueInsertSpecs(b, inserts, hashes)
	queueUpdateSpecs(b, updates, updateHashes)
	queueMarkDeleted(b, delIDs, delVersions)
}

type specColumns struct {
	ids, consumers, sources, names []string
	versions                       []int64
	metas, specs                   [][]byte
}

func columnsOf(rows []*SpecRow) specColumns {
	var c specColumns
	for _, r := range rows {
		c.ids = append(c.ids, r.ID)
		c.consumers = append(c.consumers, r.Consumer)
		c.sources = append(c.sources, r.Source)
		c.names = append(c.names, r.Name)
		c.versions = append(c.versions, r.Version)
		c.metas = append(c.metas, r.Meta)
		c.specs = append(c.specs, r.Spec)
	}
	return c
}

// queueInsertSpecs queues the new rows. A row another transaction created meanwhile is not inserted, and
// the batch is retried (errRetry); a consumer deleted meanwhile fails it.
func queueInsertSpecs(b *pgx.Batch, rows []*SpecRow, hashes []string) {
	if len(rows) == 0 {
		return
	}
	c := columnsOf(rows)
	b.Queue(`INSERT INTO resources (id, consumer_name, source, name, version, meta, spec, spec_hash)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::bytea[], $7::bytea[], $8::text[])
		ON CONFLICT (id) DO NOTHING`,
		c.ids, c.consumers, c.sources, c.names, c.versions, c.metas, c.specs, hashes).Exec(func(tag pgconn.CommandTag) error {
		if int(tag.RowsAffected()) != len(rows) {
			return errRetry
		}
		return nil
	})
}

func queueUpdateSpecs(b *pgx.Batch, rows []*SpecRow, hashes []string) {
	if len(rows) == 0 {
		return
	}
	c := columnsOf(rows)
	b.Queue(`UPDATE resources r SET name = u.name, version = u.version, meta = u.meta, spec = u.spec,
			spec_hash = u.hash, updated_at = now(), published_at = now(), republish_count = 0
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bytea[], $5::bytea[], $6::text[])
			AS u(id, name, version, meta, spec, hash)
		WHERE r.id = u.id`,
		c.ids, c.names, c.versions, c.metas, c.specs, hashes)
}

func queueMarkDeleted(b *pgx.Batch, ids []string, versions []int64) {
	if len(ids) == 0 {
		return
	}
	b.Queue(`UPDATE resources r SET deleted_at = now(), version = d.version, updated_at = now(),
			published_at = now(), republish_count = 0
		FROM unnest($1::text[], $2::bigint[]) AS d(id, version) WHERE r.id = d.id`, ids, versions)
}
