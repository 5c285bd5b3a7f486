-- Ordered delivery per resource (docs/contract.md, "Ordered delivery per resource"): an endpoint
-- with `ordering = 'resource'` receives each message's and each call's events in `sequence`
-- order, one at a time. When one of them is exhausted, `on_exhausted` says whether the next goes
-- (`skip`, and its request names the skipped events) or the resource waits (`hold`).
ALTER TABLE webhook_endpoints ADD COLUMN ordering TEXT NOT NULL DEFAULT 'none'
    CHECK (ordering IN ('none', 'resource'));
ALTER TABLE webhook_endpoints ADD COLUMN on_exhausted TEXT NOT NULL DEFAULT 'skip'
    CHECK (on_exhausted IN ('skip', 'hold'));

-- A delivery to an ordered endpoint carries its event's resource and place among that resource's
-- events; `waiting = 2`: it waits for the delivery before it (no queue message, not in the line);
-- `skipped`: the ids of the events skipped before it, space-separated, for its request's header.
ALTER TABLE webhook_deliveries ADD COLUMN resource_id TEXT;
ALTER TABLE webhook_deliveries ADD COLUMN sequence INTEGER;
ALTER TABLE webhook_deliveries ADD COLUMN skipped TEXT;
CREATE INDEX webhook_deliveries_resource ON webhook_deliveries (endpoint_id, resource_id, sequence)
    WHERE resource_id IS NOT NULL;
-- An endpoint's `held_count` counts those that wait for the one before them.
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
-- filter) hands the resource on in the statement that settles it: the next pending delivery of
-- the resource to the endpoint goes into the endpoint's line if it waited, and learns what was
-- skipped before it. An exhausted delivery of a `hold` endpoint hands nothing on.
CREATE TRIGGER webhook_deliveries_next AFTER UPDATE OF status ON webhook_deliveries
WHEN OLD.status = 'pending' AND NEW.status <> 'pending' AND NEW.resource_id IS NOT NULL
    AND NOT (NEW.status = 'failed'
             AND (SELECT on_exhausted FROM webhook_endpoints WHERE id = NEW.endpoint_id) = 'hold')
BEGIN
    UPDATE webhook_deliveries
    SET waiting = CASE WHEN waiting = 2 THEN 1 ELSE waiting END,
        skipped = CASE NEW.status
            WHEN 'failed' THEN ltrim(COALESCE(skipped, '') || COALESCE(' ' || NEW.skipped, '') || ' ' || NEW.event_id)
            WHEN 'filtered' THEN NULLIF(ltrim(COALESCE(skipped, '') || COALESCE(' ' || NEW.skipped, '')), '')
            ELSE skipped END,
        updated_at = NEW.updated_at
    WHERE id = (SELECT n.id FROM webhook_deliveries n INDEXED BY webhook_deliveries_resource
                WHERE n.endpoint_id = NEW.endpoint_id AND n.resource_id = NEW.resource_id
                  AND n.sequence > NEW.sequence AND n.status = 'pending'
                ORDER BY n.sequence LIMIT 1);
END;
