-- Customer webhooks through an outage: an endpoint can be paused (deliveries wait, nothing is
-- dropped); every event carries a per-resource sequence; each attempt keeps what the endpoint
-- answered.

ALTER TABLE webhook_endpoints ADD COLUMN paused INTEGER NOT NULL DEFAULT 0;

-- 1, 2, 3, ... per resource (message or call), in the order its events were written.
ALTER TABLE outbound_events ADD COLUMN sequence INTEGER NOT NULL DEFAULT 0;

-- The first 1 KiB of the response body and the response headers (JSON object).
ALTER TABLE webhook_attempts ADD COLUMN response_body TEXT;
ALTER TABLE webhook_attempts ADD COLUMN response_headers TEXT;

-- An endpoint's deliveries: releasing what it held, recovering a window, its attempts.
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, created_at);
