-- A message sent later: `send_at` (Unix ms) is when a `scheduled` message becomes due. The
-- sweeper finds due ones through this index; the dispatcher's claim checks the time again.
ALTER TABLE messages ADD COLUMN send_at INTEGER;
CREATE INDEX messages_scheduled ON messages (send_at) WHERE status = 'scheduled';
