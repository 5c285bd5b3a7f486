-- The call machine writes a leg's row every time its outcome changes; each write carries a
-- version, and a write older than the row's changes nothing (the guard is in the WHERE).
ALTER TABLE call_legs ADD COLUMN version INTEGER NOT NULL DEFAULT 0;

-- A receipt for a carrier message id the platform has not recorded yet waits here (parked)
-- instead of counting down retries; the batch that records the send wakes it.
ALTER TABLE carrier_events ADD COLUMN waiting_for TEXT;
CREATE INDEX carrier_events_waiting ON carrier_events (carrier, waiting_for) WHERE waiting_for IS NOT NULL;
