-- Agent subscriptions open on the live server instances: a consumer's agent is connected while it has one. An
-- instance's rows go with it when it stops or is reaped.
CREATE TABLE agent_subscriptions (
    id            text PRIMARY KEY,
    consumer_name text NOT NULL,
    instance_id   text NOT NULL REFERENCES server_instances (id) ON DELETE CASCADE,
    subscribed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX agent_subscriptions_consumer_name ON agent_subscriptions (consumer_name);
