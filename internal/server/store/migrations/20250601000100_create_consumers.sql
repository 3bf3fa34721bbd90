-- A consumer is a managed cluster; its name is the cluster name agents subscribe with.
CREATE TABLE consumers (
    id         text PRIMARY KEY,
    name       text NOT NULL UNIQUE,
    labels     jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
