-- Keys with a lifecycle and scopes, and portal sessions (docs/contract.md §5, "Keys, scopes and
-- portal sessions"). Like the routing tables, both are read and written only in `DB`, whatever
-- database the account lives in: a request is authenticated with one read there.

-- Every API key of every account: only its SHA-256 is stored, with the first characters of the
-- key (`prefix`) so a person can tell keys apart. A revoked key keeps its row.
CREATE TABLE api_keys (
    id           TEXT    PRIMARY KEY,
    account_id   TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    scope        TEXT    NOT NULL CHECK (scope IN ('full', 'read', 'endpoints')),
    key_hash     TEXT    NOT NULL UNIQUE,
    prefix       TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER,
    revoked_at   INTEGER
);
CREATE INDEX api_keys_account ON api_keys (account_id, created_at DESC, id DESC);

-- The key each account has had until now becomes its first key, scope `full`. The hash in
-- `account_routes` is the current one (a rotation changed it first); `accounts` in `DB` holds
-- those from before routing. `accounts.api_key_hash` and `account_routes.api_key_hash` keep the
-- hash of the key an account was created with, and are no longer read.
INSERT OR IGNORE INTO api_keys (id, account_id, name, scope, key_hash, prefix, created_at)
    SELECT 'key_' || lower(hex(randomblob(12))), account_id, 'default', 'full', api_key_hash, 'sk_', created_at
    FROM account_routes WHERE account_id != 'acct_operator';
INSERT OR IGNORE INTO api_keys (id, account_id, name, scope, key_hash, prefix, created_at)
    SELECT 'key_' || lower(hex(randomblob(12))), id, 'default', 'full', api_key_hash, 'sk_', created_at
    FROM accounts
    WHERE id != 'acct_operator' AND NOT EXISTS (SELECT 1 FROM api_keys k WHERE k.account_id = accounts.id);

-- A portal session: a short-lived link to one account's webhook portal, maybe read-only, maybe
-- limited to some endpoints (`endpoint_ids`, a JSON array; NULL for all). Only the secret's
-- SHA-256 is stored; the link carries the secret in its fragment, which no server sees. It works
-- while the key that minted it (`key_id`) is not revoked.
CREATE TABLE portal_sessions (
    id           TEXT    PRIMARY KEY,
    account_id   TEXT    NOT NULL,
    key_id       TEXT    NOT NULL,
    secret_hash  TEXT    NOT NULL,
    read_only    INTEGER NOT NULL,
    endpoint_ids TEXT,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL
);
CREATE INDEX portal_sessions_expiry ON portal_sessions (expires_at);

-- The origins that may embed an account's portal in a frame (a JSON array; NULL: none).
ALTER TABLE account_routes ADD COLUMN portal_origins TEXT;

-- The delivery log: the signature each attempt was sent with (the rest of the request is the
-- event's payload, its id and the attempt's timestamp).
ALTER TABLE webhook_attempts ADD COLUMN request_signature TEXT;

-- Retry all failed: one operation re-queues at most 1,000 failed deliveries of an endpoint and
-- marks each with its id, so its progress is counted from the deliveries themselves.
CREATE TABLE delivery_retries (
    id          TEXT    PRIMARY KEY,
    account_id  TEXT    NOT NULL,
    endpoint_id TEXT    NOT NULL,
    filter      TEXT    NOT NULL,
    total       INTEGER NOT NULL,
    created_at  INTEGER NOT NULL
);
CREATE INDEX delivery_retries_endpoint ON delivery_retries (endpoint_id, created_at DESC, id DESC);
ALTER TABLE webhook_deliveries ADD COLUMN retry_id TEXT;
CREATE INDEX webhook_deliveries_retry ON webhook_deliveries (retry_id) WHERE retry_id IS NOT NULL;
