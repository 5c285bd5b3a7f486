-- Reconciliation: when the cron last asked the carrier about a call or a message whose webhook
-- may never come (Unix ms; claimed by a guarded UPDATE so one run asks once), and the indexes
-- that find them without scanning.
ALTER TABLE calls ADD COLUMN checked_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN checked_at INTEGER NOT NULL DEFAULT 0;
CREATE INDEX calls_status_updated ON calls (status, updated_at);
CREATE INDEX messages_sent ON messages (updated_at) WHERE status = 'sent';
