-- Accounts, their numbers, messages with their status history, the usage ledger and the
-- outbox. Times are Unix milliseconds. Each UNIQUE index below is a guard the code relies on.

CREATE TABLE accounts (
    id           TEXT    PRIMARY KEY,
    name         TEXT    NOT NULL,
    -- SHA-256 (hex) of the API key; the key itself is shown once and never stored.
    api_key_hash TEXT    NOT NULL UNIQUE,
    created_at   INTEGER NOT NULL
);

CREATE TABLE phone_numbers (
    id           TEXT    PRIMARY KEY,
    account_id   TEXT    NOT NULL REFERENCES accounts (id),
    phone_number TEXT    NOT NULL UNIQUE,
    -- JSON array of E.164 numbers or SIP URIs, dialled in order on an inbound call.
    ring_targets TEXT    NOT NULL DEFAULT '[]',
    created_at   INTEGER NOT NULL
);
CREATE INDEX phone_numbers_account ON phone_numbers (account_id);

CREATE TABLE messages (
    id                 TEXT    PRIMARY KEY,
    account_id         TEXT    NOT NULL REFERENCES accounts (id),
    direction          TEXT    NOT NULL CHECK (direction IN ('inbound', 'outbound')),
    from_number        TEXT    NOT NULL,
    to_number          TEXT    NOT NULL,
    text               TEXT    NOT NULL,
    segments           INTEGER NOT NULL,
    encoding           TEXT    NOT NULL,
    status             TEXT    NOT NULL,
    carrier            TEXT    NOT NULL,
    carrier_message_id TEXT,
    error_code         TEXT,
    error_title        TEXT,
    idempotency_key    TEXT,
    -- The dispatcher's claim: who is sending, and until when the claim holds.
    dispatch_token     TEXT,
    claimed_until      INTEGER NOT NULL DEFAULT 0,
    send_attempts      INTEGER NOT NULL DEFAULT 0,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    sent_at            INTEGER,
    UNIQUE (carrier, carrier_message_id),
    UNIQUE (account_id, idempotency_key)
);
CREATE INDEX messages_account_page ON messages (account_id, created_at DESC, id DESC);
CREATE INDEX messages_account_status ON messages (account_id, status, created_at DESC);
-- The sweeper's scan: outbound messages not yet handed to the carrier.
CREATE INDEX messages_undispatched ON messages (updated_at)
    WHERE direction = 'outbound' AND carrier_message_id IS NULL AND status IN ('queued', 'sending');

CREATE TABLE message_status_history (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id       TEXT    NOT NULL REFERENCES messages (id),
    status           TEXT    NOT NULL,
    carrier_status   TEXT,
    carrier_event_id TEXT,
    created_at       INTEGER NOT NULL
);
CREATE INDEX message_status_history_message ON message_status_history (message_id, id);

-- The ledger: one row per charge. A resource is charged once per kind, whatever retries.
CREATE TABLE usage (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    account_id  TEXT    NOT NULL REFERENCES accounts (id),
    kind        TEXT    NOT NULL CHECK (kind IN ('sms_segments', 'call_minutes')),
    quantity    INTEGER NOT NULL,
    resource_id TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    UNIQUE (kind, resource_id)
);
CREATE INDEX usage_account_time ON usage (account_id, created_at);

-- The outbox: one row per customer event, written in the batch of the change it announces.
-- payload is the whole webhook body. One event of a type per resource.
CREATE TABLE outbound_events (
    id          TEXT    PRIMARY KEY,
    account_id  TEXT    NOT NULL REFERENCES accounts (id),
    type        TEXT    NOT NULL,
    resource_id TEXT    NOT NULL,
    payload     TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    UNIQUE (resource_id, type)
);
CREATE INDEX outbound_events_account_page ON outbound_events (account_id, created_at DESC, id DESC);

-- /admin/carrier_events?status=failed: the dead letters, newest first.
CREATE INDEX carrier_events_failed ON carrier_events (created_at DESC, id DESC) WHERE error IS NOT NULL;
