-- The dedupe log across databases (docs/scaling.md). Every database gets every migration; in a
-- database that holds only dedupe rows the resource tables stay empty, and the other way round.

-- Virtual shards moving or moved. In the database a shard left, `moved_to` names the binding
-- that holds it now, and no new row of that shard is written here again (the insert is guarded
-- by this row in the same statement). In the database a shard is arriving in, `moved_from`
-- names where it was; until `copied_at` is set, a key must be looked up there before a row is
-- written here.
CREATE TABLE shard_moves (
    vshard     INTEGER PRIMARY KEY,
    moved_to   TEXT,
    moved_from TEXT,
    copied_at  INTEGER,
    updated_at INTEGER NOT NULL
);

-- Receipts that arrived before their message's send was recorded, kept with the messages (the
-- resources' database) so parking checks for the message, and recording the send wakes the
-- receipt, each in one statement. `woken_at`: the send was recorded and the receipt's job
-- enqueued; the row goes once that enqueue is known to have happened, and the sweeper enqueues
-- again what a crash left woken but not removed.
CREATE TABLE parked_receipts (
    carrier            TEXT    NOT NULL,
    carrier_message_id TEXT    NOT NULL,
    carrier_event      TEXT    NOT NULL,
    parked_at          INTEGER NOT NULL,
    woken_at           INTEGER,
    PRIMARY KEY (carrier, carrier_message_id, carrier_event)
);
CREATE INDEX parked_receipts_woken ON parked_receipts (woken_at) WHERE woken_at IS NOT NULL;
CREATE INDEX parked_receipts_age ON parked_receipts (parked_at) WHERE woken_at IS NULL;

-- Receipts parked before this version waited in carrier_events.waiting_for; they move here.
INSERT OR IGNORE INTO parked_receipts (carrier, carrier_message_id, carrier_event, parked_at)
    SELECT carrier, waiting_for, 'cev_' || printf('%016x', id), created_at FROM carrier_events
    WHERE waiting_for IS NOT NULL AND processed_at IS NULL AND error IS NULL;
