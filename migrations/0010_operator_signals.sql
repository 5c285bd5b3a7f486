-- Operational signals belong to this reserved account; its API key hash is not a SHA-256 of
-- anything, so no key can ever authenticate as it.
INSERT INTO accounts (id, name, api_key_hash, created_at) VALUES ('acct_operator', 'operator signals', 'none: operator signals only', 0)
    ON CONFLICT DO NOTHING;
