-- /admin/metrics and /admin/webhook_deliveries?status=failed: failed deliveries by an index of
-- their own, so neither scans the table as it grows.
CREATE INDEX webhook_deliveries_failed ON webhook_deliveries (created_at DESC, id DESC) WHERE status = 'failed';
