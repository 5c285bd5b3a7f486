-- carrier_events is keyed by its rowid (INTEGER PRIMARY KEY) instead of a random text id with
-- an index of its own: a new event then writes the row and two index entries (the dedupe key
-- and the pending scan), three rows in all. Jobs still queued with an old text id find nothing
-- and are acknowledged; the sweeper re-enqueues their events by the new id.
CREATE TABLE carrier_events_keyed (
    id               INTEGER PRIMARY KEY,
    carrier          TEXT    NOT NULL,
    carrier_event_id TEXT    NOT NULL,
    event_type       TEXT    NOT NULL,
    payload          TEXT,
    processed_at     INTEGER,
    error            TEXT,
    attempts         INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    UNIQUE (carrier, carrier_event_id)
);

INSERT INTO carrier_events_keyed (carrier, carrier_event_id, event_type, payload, processed_at, error, attempts, created_at)
    SELECT carrier, carrier_event_id, event_type, payload, processed_at, error, attempts, created_at
    FROM carrier_events ORDER BY rowid;

DROP TABLE carrier_events;
ALTER TABLE carrier_events_keyed RENAME TO carrier_events;

CREATE INDEX carrier_events_pending ON carrier_events (created_at)
    WHERE processed_at IS NULL AND error IS NULL;
CREATE INDEX carrier_events_failed ON carrier_events (created_at DESC, id DESC) WHERE error IS NOT NULL;

-- The retention watermark of payloads counted old rowids.
DELETE FROM retention_marks WHERE name = 'payloads';
