-- The console (package console): which instance holds each managed cluster's console stream, and the
-- messages instances relay to one another for the clusters they do not hold. The relay table is UNLOGGED:
-- a message lives for the instant between one instance writing it and another taking it.
CREATE TABLE console_sessions (
    cluster      text PRIMARY KEY,
    instance_id  text NOT NULL,
    connected_at timestamptz NOT NULL DEFAULT now()
);

CREATE UNLOGGED TABLE console_relay (
    id          bigserial PRIMARY KEY,
    to_instance text NOT NULL,
    body        bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
