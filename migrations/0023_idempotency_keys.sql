-- Idempotency-Key on every POST and PATCH of /v1 and /admin (docs/contract.md §5): one row per
-- (scope, key) for 24 hours. `scope` is the account (or 'admin'); `fingerprint` is SHA-256 (hex)
-- of the method, path and body; `status` stays NULL while the first request runs, and `locked_until`
-- (Unix ms) says how long it may; `answer` is the first answer's body, sealed (ChaCha20-Poly1305, base64)
-- under a key derived from the Idempotency-Key itself and a server secret, so this table alone
-- never holds a secret an answer showed once.
CREATE TABLE idempotency_keys (
    scope        TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    fingerprint  TEXT    NOT NULL,
    status       INTEGER,
    answer       TEXT,
    created_at   INTEGER NOT NULL,
    locked_until INTEGER NOT NULL,
    PRIMARY KEY (scope, key)
);
-- Retention's scan for expired keys.
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
