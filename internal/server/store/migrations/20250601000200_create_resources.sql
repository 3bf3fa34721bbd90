-- A resource is one work (a manifest bundle) of one source for one consumer.
CREATE TABLE resources (
    id                text PRIMARY KEY,
    consumer_name     text NOT NULL REFERENCES consumers (name) ON DELETE RESTRICT,
    source            text NOT NULL,
    name              text NOT NULL,
    version           bigint NOT NULL,
    meta              bytea NOT NULL,
    spec              bytea NOT NULL,
    spec_hash         text NOT NULL,
    status            bytea,
    status_version    bigint,
    status_sequence   bigint,
    status_hash       text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    status_updated_at timestamptz,
    deleted_at        timestamptz,
    published_at      timestamptz NOT NULL DEFAULT now(),
    republish_count   integer NOT NULL DEFAULT 0
);

CREATE INDEX resources_consumer_idx ON resources (consumer_name, id);
CREATE INDEX resources_source_idx ON resources (source, id);
-- Specs whose status for the current version has not arrived: the undelivered sweep walks this index.
CREATE INDEX resources_undelivered_idx ON resources (published_at)
    WHERE status_version IS NULL OR status_version <> version;
CREATE INDEX resources_deleting_idx ON resources (deleted_at) WHERE deleted_at IS NOT NULL;
