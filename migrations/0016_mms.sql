-- MMS: the media of a message, and the copy of each inbound item in object storage (R2).
--
-- Rows are written in the batch that records the message, only if that batch inserted it. An
-- inbound item is copied once: a copier claims it with a lease (`copying_until`), puts the object
-- under `r2_key` (derived from the message and the position, so any second copier writes the
-- same object) and records `stored_at`; `copy_error` ends the attempts visibly.
CREATE TABLE message_media (
    message_id    TEXT    NOT NULL REFERENCES messages (id),
    position      INTEGER NOT NULL,
    -- The carrier's link (inbound; it expires) or the URL given to POST /v1/messages (outbound).
    url           TEXT    NOT NULL,
    content_type  TEXT,
    size          INTEGER,
    -- Inbound only: where the copy goes. NULL for outbound media, which is not copied.
    r2_key        TEXT,
    copying_until INTEGER NOT NULL DEFAULT 0,
    copy_attempts INTEGER NOT NULL DEFAULT 0,
    copy_error    TEXT,
    stored_at     INTEGER,
    stored_size   INTEGER,
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (message_id, position)
);
-- The sweeper's scan: inbound items not copied yet and not given up on.
CREATE INDEX message_media_uncopied ON message_media (created_at)
    WHERE r2_key IS NOT NULL AND stored_at IS NULL AND copy_error IS NULL;

-- The ledger gains `mms`: an outbound MMS is billed as one unit, not by segments. SQLite cannot
-- change a CHECK in place, so the table is rebuilt with its rows, ids and indexes; nothing
-- references it.
CREATE TABLE usage_new (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    account_id  TEXT    NOT NULL REFERENCES accounts (id),
    kind        TEXT    NOT NULL CHECK (kind IN ('sms_segments', 'mms', 'call_minutes')),
    quantity    INTEGER NOT NULL,
    resource_id TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    UNIQUE (kind, resource_id)
);
INSERT INTO usage_new (id, account_id, kind, quantity, resource_id, created_at)
    SELECT id, account_id, kind, quantity, resource_id, created_at FROM usage;
DROP TABLE usage;
ALTER TABLE usage_new RENAME TO usage;
CREATE INDEX usage_account_time ON usage (account_id, created_at);
