-- Test sends (docs/contract.md §6, "Event catalog and test sends"): a test event goes to the one
-- endpoint it was sent to, and never again: replays, recoveries and event lists of its type
-- leave it out. `endpoint.test` was only ever a test.
ALTER TABLE outbound_events ADD COLUMN test INTEGER NOT NULL DEFAULT 0;
UPDATE outbound_events SET test = 1 WHERE type = 'endpoint.test';
