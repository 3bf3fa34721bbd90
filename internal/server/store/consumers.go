package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

const consumerColumns = "id, name, labels, created_at, updated_at, " +
	"(SELECT count(*) FROM agent_subscriptions s WHERE s.consumer_name = consumers.name)"

func scanConsumer(row pgx.Row) (Consumer, error) {
	var c Consumer
	var labels []byte
	if err := row.Scan(&c.ID, &c.Name, &labels, &c.CreatedAt, &c.UpdatedAt, &c.ConnectedAgents); err != nil {
		return Consumer{}, err
	}
	if err := json.Unmarshal(labels, &c.Labels); err != nil {
		return Consumer{}, fmt.Errorf("decode labels of consumer %s: %w", c.Name, err)
	}
	return c, nil
}

func (s *pgStore) CreateConsumer(ctx context.Context, c Consumer) (created Consumer, err error) {
	ctx, end := s.begin(ctx, "create_consumer", &err)
	defer end()
	if c.ID == "" {
		c.ID = uuid.NewString()
	}
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	labels, err := json.Marshal(c.Labels)
	if err != nil {
		return Consumer{}, fmt.Errorf("encode labels of consumer %s: %w", c.Name, err)
	}
	row := s.pool.QueryRow(ctx,
		"INSERT INTO consumers (id, name, labels) VALUES ($1, $2, $3) RETURNING "+consumerColumns,
		c.ID, c.Name, labels)
	created, err = scanConsumer(row)
	if pgCode(err) == codeUniqueViolation {
		return Consumer{}, fmt.Errorf("%w: consumer %s already exists", ErrConflict, c.Name)
	}
	if err != nil {
		return Consumer{}, fmt.Errorf("create consumer %s: %w", c.Name, err)
	}
	return created, nil
}

func (s *pgStore) EnsureConsumer(ctx context.Context, name string) (err error) {
	ctx, end := s.begin(ctx, "ensure_consumer", &err)
	defer end()
	_, err = s.pool.Exec(ctx,
		"INSERT INTO consumers (id, name) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING", uuid.NewString(), name)
	if err != nil {
		return fmt.Errorf("register consumer %s: %w", name, err)
	}
	return nil
}

func (s *pgStore) GetConsumer(ctx context.Context, idOrName string) (c Consumer, err error) {
	ctx, end := s.begin(ctx, "get_consumer", &err)
	defer end()
	row := s.pool.QueryRow(ctx, "SELECT "+consumerColumns+" FROM consumers WHERE id = $1 OR name = $1", idOrName)
	c, err = scanConsumer(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return Consumer{}, fmt.Errorf("%w: consumer %s", ErrNotFound, idOrName)
	}
	if err != nil {
		return Consumer{}, fmt.Errorf("get consumer %s: %w", idOrName, err)
	}
	return c, nil
}

func (s *pgStore) ListConsumers(ctx context.Context, offset, limit int) (list []Consumer, total int, err error) {
	ctx, end := s.begin(ctx, "list_consumers", &err)
	defer end()
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM consumers").Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("count consumers: %w", err)
	}
	rows, err := s.pool.Query(ctx,
		"SELECT "+consumerColumns+" FROM consumers ORDER BY name OFFSET $1 LIMIT $2", offset, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("list consumers: %w", err)
	}
	list, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Consumer, error) { return scanConsumer(r) })
	if err != nil {
		return nil, 0, fmt.Errorf("list consumers: %w", err)
	}
	return list, total, nil
}

func (s *pgStore) DeleteConsumer(ctx context.Context, idOrName string) (err error) {
	ctx, end := s.begin(ctx, "delete_consumer", &err)
	defer end()
	tag, err := s.pool.Exec(ctx, "DELETE FROM consumers WHERE id = $1 OR name = $1", idOrName)
	if pgCode(err) == codeForeignKeyViolation {
		return fmt.Errorf("%w: consumer %s still has resources", ErrConflict, idOrName)
	}
	if err != nil {
		return fmt.Errorf("delete consumer %s: %w", idOrName, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: consumer %s", ErrNotFound, idOrName)
	}
	return nil
}

func (s *pgStore) AddAgentSubscription(ctx context.Context, consumer string) (id string, err error) {
	ctx, end := s.begin(ctx, "add_agent_subscription", &err)
	defer end()
	id = uuid.NewString()
	_, err = s.pool.Exec(ctx, "INSERT INTO agent_subscriptions (id, consumer_name, instance_id) VALUES ($1, $2, $3)",
		id, consumer, s.instance)
	if err != nil {
		return "", fmt.Errorf("record agent subscription of consumer %s: %w", consumer, err)
	}
	return id, nil
}

func (s *pgStore) RemoveAgentSubscription(ctx context.Context, id string) (err error) {
	ctx, end := s.begin(ctx, "remove_agent_subscription", &err)
	defer end()
	if _, err = s.pool.Exec(ctx, "DELETE FROM agent_subscriptions WHERE id = $1", id); err != nil {
		return fmt.Errorf("forget agent subscription %s: %w", id, err)
	}
	return nil
}
