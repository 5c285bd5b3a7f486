-- One endpoint never holds more than its share (docs/contract.md §6, "One endpoint never slows another").
--
-- The circuit breaker's state (exactly_core::breaker), replaced by compare-and-swap on
-- `circuit_version`: `circuit` is 'closed', 'open' or 'half_open'; `circuit_at` is the start of
-- the counting window (closed), the probe time (open) or the lease end of the probe in flight
-- (half-open, 0 when none); the counters are the window's attempts and points (closed) or the
-- probes that succeeded in a row (half-open); `circuit_opens` counts openings since it closed.
ALTER TABLE webhook_endpoints ADD COLUMN circuit TEXT NOT NULL DEFAULT 'closed';
ALTER TABLE webhook_endpoints ADD COLUMN circuit_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhook_endpoints ADD COLUMN circuit_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhook_endpoints ADD COLUMN circuit_failed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhook_endpoints ADD COLUMN circuit_succeeded INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhook_endpoints ADD COLUMN circuit_opens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhook_endpoints ADD COLUMN circuit_version INTEGER NOT NULL DEFAULT 0;
-- At most this many attempts to the endpoint are in flight at once.
ALTER TABLE webhook_endpoints ADD COLUMN max_in_flight INTEGER NOT NULL DEFAULT 4;

-- A delivery in its endpoint's line (`waiting = 1`): due, but its endpoint is at its in-flight
-- limit or its circuit is open. No queue message exists for it; the attempt that frees a place,
-- or the probe that closes the circuit, takes the oldest in line.
ALTER TABLE webhook_deliveries ADD COLUMN waiting INTEGER NOT NULL DEFAULT 0;
-- While an attempt is in flight: its lease end (Unix ms), 0 otherwise.
ALTER TABLE webhook_deliveries ADD COLUMN in_flight_until INTEGER NOT NULL DEFAULT 0;

-- An attempt claimed before this migration (attempt count taken, lease not over, outcome not
-- recorded) keeps its in-flight place, so a resume right after the deploy never releases it.
UPDATE webhook_deliveries SET in_flight_until = next_attempt_at
WHERE status = 'pending' AND attempts > 0 AND next_attempt_at > CAST(strftime('%s', 'now') AS INTEGER) * 1000
  AND NOT EXISTS (SELECT 1 FROM webhook_attempts a WHERE a.delivery_id = webhook_deliveries.id
                  AND a.attempt = webhook_deliveries.attempts);

CREATE INDEX webhook_deliveries_line ON webhook_deliveries (endpoint_id, created_at, id)
    WHERE waiting = 1 AND status = 'pending';
CREATE INDEX webhook_deliveries_in_flight ON webhook_deliveries (endpoint_id, in_flight_until)
    WHERE in_flight_until > 0;
