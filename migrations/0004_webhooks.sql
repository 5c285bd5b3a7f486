-- Customer webhook endpoints, one delivery per (event, endpoint), and every attempt.
-- Times are Unix milliseconds.

CREATE TABLE webhook_endpoints (
    id                   TEXT    PRIMARY KEY,
    account_id           TEXT    NOT NULL REFERENCES accounts (id),
    url                  TEXT    NOT NULL,
    -- JSON array of event types.
    event_types          TEXT    NOT NULL,
    -- whsec_...: needed in clear to sign; never returned after creation.
    secret               TEXT    NOT NULL,
    enabled              INTEGER NOT NULL DEFAULT 1,
    disabled_reason      TEXT,
    consecutive_failures INTEGER NOT NULL DEFAULT 0,
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER NOT NULL
);
CREATE INDEX webhook_endpoints_account ON webhook_endpoints (account_id, enabled);

CREATE TABLE webhook_deliveries (
    id              TEXT    PRIMARY KEY,
    event_id        TEXT    NOT NULL REFERENCES outbound_events (id),
    endpoint_id     TEXT    NOT NULL,
    account_id      TEXT    NOT NULL,
    -- 'initial' from the fan-out, 'replay' from POST /v1/events/{id}/replay.
    kind            TEXT    NOT NULL CHECK (kind IN ('initial', 'replay')),
    status          TEXT    NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    last_error      TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);
-- The fan-out cannot create two deliveries of one event to one endpoint.
CREATE UNIQUE INDEX webhook_deliveries_initial ON webhook_deliveries (event_id, endpoint_id) WHERE kind = 'initial';
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_id);
-- The sweeper's scan: pending deliveries whose next attempt is due.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';

CREATE TABLE webhook_attempts (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id     TEXT    NOT NULL REFERENCES webhook_deliveries (id),
    attempt         INTEGER NOT NULL,
    attempted_at    INTEGER NOT NULL,
    webhook_timestamp INTEGER NOT NULL,
    status_code     INTEGER,
    latency_ms      INTEGER NOT NULL,
    error           TEXT,
    next_attempt_at INTEGER,
    UNIQUE (delivery_id, attempt)
);
