-- Endpoint filters and custom headers (docs/contract.md §6), and the `filtered` delivery status:
-- a delivery its endpoint's filter held back is settled as such, visible on its event.

-- The filter's text (core::filter), NULL for none.
ALTER TABLE webhook_endpoints ADD COLUMN filter TEXT;
-- Custom headers sent with every attempt: a JSON object of lower-case name to value, NULL for none.
ALTER TABLE webhook_endpoints ADD COLUMN headers TEXT;

-- SQLite cannot change a CHECK constraint in place: the table is built again. Its attempts
-- reference it, so they are set aside first (a parent dropped under its children fails the
-- deferred foreign-key check) and put back after.
PRAGMA defer_foreign_keys = ON;

CREATE TABLE webhook_attempts_kept AS SELECT * FROM webhook_attempts;
-- The AUTOINCREMENT counter goes with the table: kept too, so no id is ever given out twice (the
-- retention watermark of attempts assumes ids only grow).
CREATE TABLE webhook_attempts_seq AS SELECT seq FROM sqlite_sequence WHERE name = 'webhook_attempts';
DROP TABLE webhook_attempts;

CREATE TABLE webhook_deliveries_new (
    id              TEXT    PRIMARY KEY,
    event_id        TEXT    NOT NULL REFERENCES outbound_events (id),
    endpoint_id     TEXT    NOT NULL,
    account_id      TEXT    NOT NULL,
    -- 'initial' from the fan-out, 'replay' from a replay or a recovery.
    kind            TEXT    NOT NULL CHECK (kind IN ('initial', 'replay')),
    -- 'filtered': the endpoint's filter held it back; nothing was sent.
    status          TEXT    NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed', 'filtered')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    last_error      TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    waiting         INTEGER NOT NULL DEFAULT 0,
    in_flight_until INTEGER NOT NULL DEFAULT 0
);
INSERT INTO webhook_deliveries_new (id, event_id, endpoint_id, account_id, kind, status, attempts, next_attempt_at,
                                    last_error, created_at, updated_at, waiting, in_flight_until)
SELECT id, event_id, endpoint_id, account_id, kind, status, attempts, next_attempt_at, last_error, created_at,
       updated_at, waiting, in_flight_until
FROM webhook_deliveries;
DROP TABLE webhook_deliveries;
ALTER TABLE webhook_deliveries_new RENAME TO webhook_deliveries;

CREATE UNIQUE INDEX webhook_deliveries_initial ON webhook_deliveries (event_id, endpoint_id) WHERE kind = 'initial';
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_id);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, created_at);
CREATE INDEX webhook_deliveries_failed ON webhook_deliveries (created_at DESC, id DESC) WHERE status = 'failed';
CREATE INDEX webhook_deliveries_line ON webhook_deliveries (endpoint_id, created_at, id)
    WHERE waiting = 1 AND status = 'pending';
CREATE INDEX webhook_deliveries_in_flight ON webhook_deliveries (endpoint_id, in_flight_until)
    WHERE in_flight_until > 0;

CREATE TABLE webhook_attempts (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    delivery_id       TEXT    NOT NULL REFERENCES webhook_deliveries (id),
    attempt           INTEGER NOT NULL,
    attempted_at      INTEGER NOT NULL,
    webhook_timestamp INTEGER NOT NULL,
    status_code       INTEGER,
    latency_ms        INTEGER NOT NULL,
    error             TEXT,
    next_attempt_at   INTEGER,
    response_body     TEXT,
    response_headers  TEXT,
    UNIQUE (delivery_id, attempt)
);
INSERT INTO webhook_attempts (id, delivery_id, attempt, attempted_at, webhook_timestamp, status_code, latency_ms,
                              error, next_attempt_at, response_body, response_headers)
SELECT id, delivery_id, attempt, attempted_at, webhook_timestamp, status_code, latency_ms, error, next_attempt_at,
       response_body, response_headers
FROM webhook_attempts_kept;
DROP TABLE webhook_attempts_kept;
UPDATE sqlite_sequence SET seq = MAX(seq, (SELECT seq FROM webhook_attempts_seq))
WHERE name = 'webhook_attempts' AND EXISTS (SELECT 1 FROM webhook_attempts_seq);
INSERT INTO sqlite_sequence (name, seq)
SELECT 'webhook_attempts', seq FROM webhook_attempts_seq
WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'webhook_attempts');
DROP TABLE webhook_attempts_seq;
