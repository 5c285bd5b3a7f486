-- While an endpoint's circuit is not closed its line is taken fresh first (docs/contract.md,
-- "Circuit breaker"): a probe is a delivery that has not failed yet (none of its attempts spent:
-- `attempts = cut`) where one waits, so one event type the endpoint cannot take, retried in the
-- line, does not fail every probe. This index finds the oldest such delivery of a line.
CREATE INDEX webhook_deliveries_fresh_line ON webhook_deliveries (endpoint_id, created_at, id)
    WHERE waiting = 1 AND status = 'pending' AND attempts = cut;
