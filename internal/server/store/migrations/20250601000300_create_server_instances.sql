-- Live server instances sharing this database; each heartbeats its row.
CREATE TABLE server_instances (
    id           text PRIMARY KEY,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);
