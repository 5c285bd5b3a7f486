-- A settling hands its resource on only to the deliveries that may go now (docs/contract.md,
-- "Ordered delivery per resource"): a delivery still behind another earlier event of its
-- resource (a call's third event, while its second is pending) stays out of the endpoint's line,
-- where it would stand ahead of the endpoint's other resources until its claim parked it again.
-- It is handed on when that earlier event settles in turn. The test of "behind" is the claim's
-- (`BEHIND` in edge/src/store/deliveries/claims.rs).
DROP TRIGGER webhook_deliveries_next;
CREATE TRIGGER webhook_deliveries_next AFTER UPDATE OF status ON webhook_deliveries
WHEN OLD.status = 'pending' AND NEW.status <> 'pending' AND NEW.resource_id IS NOT NULL
BEGIN
    UPDATE webhook_deliveries SET waiting = 1, updated_at = NEW.updated_at
    WHERE endpoint_id = NEW.endpoint_id AND resource_id = NEW.resource_id AND waiting = 2 AND status = 'pending'
      AND NOT EXISTS (
        SELECT 1 FROM webhook_endpoints o WHERE o.id = NEW.endpoint_id AND o.ordering = 'resource'
          AND EXISTS (SELECT 1 FROM webhook_deliveries p INDEXED BY webhook_deliveries_resource
            WHERE p.endpoint_id = NEW.endpoint_id AND p.resource_id = NEW.resource_id
              AND p.resource_id IS NOT NULL AND p.sequence < webhook_deliveries.sequence
              AND (p.status = 'pending'
                   OR (p.status = 'failed' AND o.on_exhausted = 'hold'
                       AND NOT EXISTS (SELECT 1 FROM webhook_deliveries s INDEXED BY webhook_deliveries_event
                                       WHERE s.event_id = p.event_id AND s.endpoint_id = p.endpoint_id
                                         AND s.status = 'succeeded')))));
END;
