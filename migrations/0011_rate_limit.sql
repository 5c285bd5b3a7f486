-- An optional per-endpoint rate limit: deliveries beyond it wait for the next slot
-- (`rate_next_at`, Unix ms), claimed by a guarded UPDATE so two jobs never take one slot.
ALTER TABLE webhook_endpoints ADD COLUMN rate_limit_per_second INTEGER;
ALTER TABLE webhook_endpoints ADD COLUMN rate_next_at INTEGER NOT NULL DEFAULT 0;
