package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

const specRowColumns = "id, consumer_name, source, name, version, meta, spec, deleted_at"

func scanSpecRow(row pgx.CollectableRow) (SpecRow, error) {
	var r SpecRow
	err := row.Scan(&r.ID, &r.Consumer, &r.Source, &r.Name, &r.Version, &r.Meta, &r.Spec, &r.DeletedAt)
	return r, err
}

func (s *pgStore) SpecVersions(ctx context.Context, consumer string) (list []SpecVersion, err error) {
	ctx, end := s.begin(ctx, "spec_versions", &err)
	defer end()
	rows, err := s.pool.Query(ctx, "SELECT id, version, deleted_at IS NOT NULL FROM resources WHERE consumer_name = $1 ORDER BY id", consumer)
	if err != nil {
		return nil, fmt.Errorf("list resource versions of consumer %s: %w", consumer, err)
	}
	list, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (SpecVersion, error) {
		var v SpecVersion
		return v, r.Scan(&v.ID, &v.Version, &v.Deleting)
	})
	if err != nil {
		return nil, fmt.Errorf("list resource versions of consumer %s: %w", consumer, err)
	}
	return list, nil
}

func (s *pgStore) LoadSpecs(ctx context.Context, ids []string) (list []SpecRow, err error) {
	ctx, end := s.begin(ctx, "load_specs", &err)
	defer end()
	rows, err := s.pool.Query(ctx, "SELECT "+specRowColumns+" FROM resources WHERE id = ANY($1)", ids)
	if err != nil {
		return nil, fmt.Errorf("load %d resources: %w", len(ids), err)
	}
	list, err = pgx.CollectRows(rows, scanSpecRow)
	if err != nil {
		return nil, fmt.Errorf("load %d resources: %w", len(ids), err)
	}
	return list, nil
}

func (s *pgStore) StatusHashes(ctx context.Context, source, consumer string) (list []HashRow, err error) {
	ctx, end := s.begin(ctx, "status_hashes", &err)
	defer end()
	rows, err := s.pool.Query(ctx, `SELECT id, coalesce(status_hash, '') FROM resources
		WHERE source = $1 AND ($2 = '' OR consumer_name = $2) ORDER BY id`, source, consumer)
	if err != nil {
		return nil, fmt.Errorf("list status hashes of source %s: %w", source, err)
	}
	list, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (HashRow, error) {
		var h HashRow
		return h, r.Scan(&h.ID, &h.Hash)
	})
	if err != nil {
		return nil, fmt.Errorf("list status hashes of source %s: %w", source, err)
	}
	return list, nil
}

func (s *pgStore) LoadStatuses(ctx context.Context, ids []string) (list []StatusRow, err error) {
	ctx, end := s.begin(ctx, "load_statuses", &err)
	defer end()
	rows, err := s.pool.Query(ctx, `SELECT id, consumer_name, source, status_version, status_sequence, status_hash, status
		FROM resources WHERE id = ANY($1) AND status IS NOT NULL`, ids)
	if err != nil {
		return nil, fmt.Errorf("load statuses of %d resources: %w", len(ids), err)
	}
	list, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (StatusRow, error) {
		var st StatusRow
		return st, r.Scan(&st.ID, &st.Consumer, &st.Source, &st.Version, &st.Sequence, &st.Hash, &st.Status)
	})
	if err != nil {
		return nil, fmt.Errorf("load statuses of %d resources: %w", len(ids), err)
	}
	return list, nil
}

const bundleColumns = specRowColumns + `, created_at, updated_at, status, coalesce(status_version, 0),
	coalesce(status_sequence, 0), coalesce(status_hash, '')`

// bundleColumnsWithoutSpec are bundleColumns with a NULL in place of the spec, which is then neither read (nor
// decompressed) by PostgreSQL nor sent.
var bundleColumnsWithoutSpec = strings.Replace(bundleColumns, "meta, spec,", "meta, NULL::bytea,", 1)

func scanBundle(row pgx.Row) (Bundle, error) {
	var b Bundle
	err := row.Scan(&b.ID, &b.Consumer, &b.Source, &b.Name, &b.Version, &b.Meta, &b.Spec, &b.DeletedAt,
		&b.CreatedAt, &b.UpdatedAt, &b.Status, &b.StatusVersion, &b.StatusSequence, &b.StatusHash)
	return b, err
}

// bundleFilter builds the WHERE clause of a bundle query and its arguments.
func bundleFilter(q BundleQuery) (string, []any) {
	var conds []string
	var args []any
	add := func(column, value string) {
		if value != "" {
			args = append(args, value)
			conds = append(conds, column+" = $"+strconv.Itoa(len(args)))
		}
	}
	add("source", q.Source)
	add("consumer_name", q.Consumer)
	add("name", q.Name)
	if len(conds) == 0 {
		return "TRUE", args
	}
	return strings.Join(conds, " AND "), args
}

func (s *pgStore) ListBundles(ctx context.Context, q BundleQuery) (page BundlePage, err error) {
	ctx, end := s.begin(ctx, "list_bundles", &err)
	defer end()
	where, args := bundleFilter(q)
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM resources WHERE "+where, args...).Scan(&page.Total); err != nil {
		return BundlePage{}, fmt.Errorf("count resource bundles: %w", err)
	}
	pageWhere, pageArgs := where, args
	if q.After != "" {
		pageArgs = append(pageArgs, q.After)
		pageWhere += " AND id > $" + strconv.Itoa(len(pageArgs))
	}
	pageArgs = append(pageArgs, q.Limit)
	columns := bundleColumns
	if q.WithoutSpec {
		columns = bundleColumnsWithoutSpec
	}
	sql := "SELECT " + columns + " FROM resources WHERE " + pageWhere + " ORDER BY id LIMIT $" + strconv.Itoa(len(pageArgs))
	if q.After == "" && q.Offset > 0 {
		pageArgs = append(pageArgs, q.Offset)
		sql += " OFFSET $" + strconv.Itoa(len(pageArgs))
	}
	rows, err := s.pool.Query(ctx, sql, pageArgs...)
	if err != nil {
		return BundlePage{}, fmt.Errorf("list resource bundles: %w", err)
	}
	page.Items, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Bundle, error) { return scanBundle(r) })
	if err != nil {
		return BundlePage{}, fmt.Errorf("list resource bundles: %w", err)
	}
	return page, nil
}

func (s *pgStore) GetBundle(ctx context.Context, id string) (b Bundle, err error) {
	ctx, end := s.begin(ctx, "get_bundle", &err)
	defer end()
	b, err = scanBundle(s.pool.QueryRow(ctx, "SELECT "+bundleColumns+" FROM resources WHERE id = $1", id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Bundle{}, fmt.Errorf("%w: resource bundle %s", ErrNotFound, id)
	}
	if err != nil {
		return Bundle{}, fmt.Errorf("get resource bundle %s: %w", id, err)
	}
	return b, nil
}
