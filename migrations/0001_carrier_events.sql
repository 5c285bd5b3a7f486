-- One row per provider event id. The unique index is the dedupe: a repeated delivery's
-- INSERT ... ON CONFLICT DO NOTHING changes no row. Times are Unix milliseconds.
CREATE TABLE carrier_events (
    id               TEXT    PRIMARY KEY,
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

-- The sweeper's scan: events neither processed nor failed, oldest first.
CREATE INDEX carrier_events_pending ON carrier_events (created_at)
    WHERE processed_at IS NULL AND error IS NULL;
