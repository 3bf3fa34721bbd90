package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// statusState is what the decision needs of a stored row, updated in memory as a batch is decided.
type statusState struct {
	exists         bool
	consumer       string
	source         string
	version        int64
	statusVersion  *int64
	statusSequence *int64
	hash           string
	deleting       bool
	// apply holds the status to write when one in this batch was accepted; removed marks a confirmed
	// deletion.
	apply   *StatusWrite
	removed bool
}

// decideStatus applies one status write to the state of its row. A status is accepted only for the
// current spec version, with a newer sequence id, and when it differs from the stored one; a deletion
// confirmed for a row marked for deletion removes the row.
func decideStatus(w StatusWrite, st *statusState) StatusResult {
	row := StatusRow{ID: w.ID, Consumer: w.Consumer, Source: st.source, Version: w.Version, Sequence: w.Sequence,
		Hash: w.Hash, Status: w.Status}
	switch {
	case (!st.exists || st.removed) && w.Deleted:
		// The agent confirms a deletion the server already completed: nothing is left to do.
		return StatusResult{Outcome: StatusIdentical, Row: row}
	case !st.exists || st.removed:
		return StatusResult{Err: fmt.Errorf("%w: resource %s", ErrNotFound, w.ID)}
	case st.consumer != w.Consumer:
		return StatusResult{Err: fmt.Errorf("%w: resource %s belongs to another consumer", ErrForbidden, w.ID)}
	case w.Deleted && st.deleting:
		st.removed = true
		row.Removed, row.Status = true, nil
		return StatusResult{Outcome: StatusRemoved, Row: row}
	case st.statusVersion != nil && *st.statusVersion == w.Version && st.hash == w.Hash:
		return StatusResult{Outcome: StatusIdentical, Row: row}
	case w.Version != st.version:
		return StatusResult{Err: fmt.Errorf("%w: status of resource %s is for version %d, current version is %d",
			ErrStale, w.ID, w.Version, st.version)}
	case st.statusSequence != nil && w.Sequence <= *st.statusSequence:
		return StatusResult{Err: fmt.Errorf("%w: status of resource %s has sequence id %d, stored status has %d",
			ErrStale, w.ID, w.Sequence, *st.statusSequence)}
	}
	version, sequence := w.Version, w.Sequence
	st.statusVersion, st.statusSequence, st.hash, st.apply = &version, &sequence, w.Hash, &w
	return StatusResult{Outcome: StatusApplied, Row: row}
}

// ApplyStatuses decides and writes a batch in one transaction of two round trips: BEGIN with the row locks,
// then the writes, the notifications and COMMIT.
func (s *pgStore) ApplyStatuses(ctx context.Context, writes []StatusWrite) (results []StatusResult, err error) {
	ctx, end := s.begin(ctx, "apply_statuses", &err)
	defer end()
	results = make([]StatusResult, len(writes))
	err = s.inTx(ctx, func(conn *pgx.Conn) error {
		states, order := newStatusStates(writes)
		lock := &pgx.Batch{}
		lock.Queue("BEGIN")
		lock.Queue(`SELECT id, consumer_name, source, version, status_version, status_sequence,
				coalesce(status_hash, ''), deleted_at IS NOT NULL
			FROM resources WHERE id = ANY($1) ORDER BY id FOR UPDATE`, order).Query(func(rows pgx.Rows) error {
			return scanStatusStates(rows, states)
		})
		if err := conn.SendBatch(ctx, lock).Close(); err != nil {
			return fmt.Errorf("lock resources: %w", err)
		}
		var notes []Notification
		for i, w := range writes {
			results[i] = decideStatus(w, states[w.ID])
			notes = append(notes, statusNotification(results[i])...)
		}
		write := &pgx.Batch{}
		queueStatusWrites(write, states, order)
		if err := s.queueNotify(write, notes); err != nil {
			return err
		}
		write.Queue("COMMIT")
		if err := conn.SendBatch(ctx, write).Close(); err != nil {
			return fmt.Errorf("write statuses: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("apply %d status events: %w", len(writes), err)
	}
	return results, nil
}

func statusNotification(r StatusResult) []Notification {
	if r.Err != nil {
		return nil
	}
	switch r.Outcome {
	case StatusApplied:
		return []Notification{{Kind: KindStatus, ID: r.Row.ID, Source: r.Row.Source}}
	case StatusRemoved:
		return []Notification{{Kind: KindRemoved, ID: r.Row.ID, Consumer: r.Row.Consumer, Source: r.Row.Source,
			Version: r.Row.Version, Sequence: r.Row.Sequence}}
	}
	return nil
}

// newStatusStates returns an empty state for every resource the writes name, and the ids in first-seen order.
func newStatusStates(writes []StatusWrite) (map[string]*statusState, []string) {
	states := make(map[string]*statusState, len(writes))
	order := make([]string, 0, len(writes))
	for _, w := range writes {
		if _, ok := states[w.ID]; !ok {
			states[w.ID] = &statusState{}
			order = append(order, w.ID)
		}
	}
	return states, order
}

// scanStatusStates fills the states of the locked rows.
func scanStatusStates(rows pgx.Rows, states map[string]*statusState) error {
	for rows.Next() {
		var id string
		st := statusState{exists: true}
		if err := rows.Scan(&id, &st.consumer, &st.source, &st.version, &st.statusVersion, &st.statusSequence,
			&st.hash, &st.deleting); err != nil {
			return err
		}
		*states[id] = st
	}
	return rows.Err()
}

// queueStatusWrites queues what the decisions changed: new statuses, and removed rows.
func queueStatusWrites(b *pgx.Batch, states map[string]*statusState, order []string) {
	var ids, hashes, removed []string
	var versions, sequences []int64
	var statuses [][]byte
	for _, id := range order {
		st := states[id]
		if st.removed {
			removed = append(removed, id)
			continue
		}
		if w := st.apply; w != nil {
			ids, hashes = append(ids, id), append(hashes, w.Hash)
			versions, sequences = append(versions, w.Version), append(sequences, w.Sequence)
			statuses = append(statuses, w.Status)
		}
	}
	if len(ids) > 0 {
		b.Queue(`UPDATE resources r SET status = u.status, status_version = u.version,
				status_sequence = u.sequence, status_hash = u.hash, status_updated_at = now()
			FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::bytea[])
				AS u(id, version, sequence, hash, status)
			WHERE r.id = u.id`, ids, versions, sequences, hashes, statuses)
	}
	if len(removed) > 0 {
		b.Queue("DELETE FROM resources WHERE id = ANY($1)", removed)
	}
}
