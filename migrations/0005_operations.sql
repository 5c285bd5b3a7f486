-- Retention watermarks, and endpoint secret rotation.

-- How far each retention step has gone, by rowid (rows are scanned in insertion order, so no
-- extra index on the hot tables is needed).
CREATE TABLE retention_marks (
    name      TEXT    PRIMARY KEY,
    last_id   INTEGER NOT NULL
);

-- During a rotation the previous secret still signs (a second webhook-signature), until it
-- expires.
ALTER TABLE webhook_endpoints ADD COLUMN previous_secret TEXT;
ALTER TABLE webhook_endpoints ADD COLUMN previous_secret_expires_at INTEGER;
