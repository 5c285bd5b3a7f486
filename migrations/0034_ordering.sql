-- Ordered delivery per resource (docs/contract.md, "Ordered delivery per resource"): an endpoint
-- with `ordering = 'resource'` receives each message's and each call's events in `sequence`
-- order, one at a time. When one of them is exhausted, `on_exhausted` says whether the next goes
-- (`skip`, and its request names the skipped events in `exactly-skipped`) or the resource waits
-- (`hold`).
ALTER TABLE webhook_endpoints ADD COLUMN ordering TEXT NOT NULL DEFAULT 'none'
    CHECK (ordering IN ('none', 'resource'));
ALTER TABLE webhook_endpoints ADD COLUMN on_exhausted TEXT NOT NULL DEFAULT 'skip'
    CHECK (on_exhausted IN ('skip', 'hold'));

-- A delivery to an ordered endpoint carries its event's resource and place among that resource's
-- events; `waiting = 2`: it waits for an earlier event of its resource (no queue message, not in
-- the line).
ALTER TABLE webhook_deliveries ADD COLUMN resource_id TEXT;
ALTER TABLE webhook_deliveries ADD COLUMN sequence INTEGER;
CREATE INDEX webhook_deliveries_resource ON webhook_deliveries (endpoint_id, resource_id, sequence)
    WHERE resource_id IS NOT NULL;
-- An endpoint's `held_count` counts those that wait for an earlier event, and the sweeper finds
-- any that waited long.
CREATE INDEX webhook_deliveries_behind ON webhook_deliveries (endpoint_id) WHERE waiting = 2 AND status = 'pending';

-- Every way a delivery is written (the fan-out, a replay, a recovery) takes its event's resource
-- when its endpoint is ordered, in the statement that writes it.
CREATE TRIGGER webhook_deliveries_ordered AFTER INSERT ON webhook_deliveries
WHEN (SELECT ordering FROM webhook_endpoints WHERE id = NEW.endpoint_id) = 'resource'
BEGIN
    UPDATE webhook_deliveries
    SET (resource_id, sequence) = (SELECT resource_id, sequence FROM outbound_events WHERE id = NEW.event_id)
    WHERE id = NEW.id;
END;

-- Every way a delivery settles (a success, an exhaustion, a failure for good, its endpoint's
-- filter, its endpoint's deletion) hands its resource on in the statement that settles it: every
-- delivery of the resource to the endpoint that waited goes into the endpoint's line, where its
-- claim decides again (one still behind an earlier event waits again).
CREATE TRIGGER webhook_deliveries_next AFTER UPDATE OF status ON webhook_deliveries
WHEN OLD.status = 'pending' AND NEW.status <> 'pending' AND NEW.resource_id IS NOT NULL
BEGIN
    UPDATE webhook_deliveries SET waiting = 1, updated_at = NEW.updated_at
    WHERE endpoint_id = NEW.endpoint_id AND resource_id = NEW.resource_id AND waiting = 2 AND status = 'pending';
END;

-- `exactly-skipped` is the delivery's own header now: a custom header of that name, stored before,
-- is dropped (docs/contract.md, "Custom headers").
UPDATE webhook_endpoints
SET headers = (SELECT CASE WHEN COUNT(*) = 0 THEN NULL ELSE json_group_object(key, value) END
               FROM json_each(webhook_endpoints.headers) WHERE lower(key) <> 'exactly-skipped')
WHERE headers IS NOT NULL
  AND EXISTS (SELECT 1 FROM json_each(webhook_endpoints.headers) WHERE lower(key) = 'exactly-skipped');
