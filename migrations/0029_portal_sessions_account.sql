-- A cap on an account's live portal sessions (docs/contract.md §5, "Keys, scopes and portal
-- sessions"): a new session counts the account's unexpired ones through this index.
CREATE INDEX portal_sessions_account ON portal_sessions (account_id, expires_at);
