-- When each leg of a sequential ring answered and ended, as the carrier reported them (Unix ms);
-- `created_at` is when it was dialled.
ALTER TABLE call_legs ADD COLUMN answered_at INTEGER;
ALTER TABLE call_legs ADD COLUMN ended_at INTEGER;

-- The operator's list of accounts, newest first, paged by (created_at, id).
CREATE INDEX accounts_created ON accounts (created_at, id);
