-- Accounts across databases (docs/scaling.md, "Accounts across databases"). Every account
-- database gets every migration; these routing tables are read and written only in `DB`.

-- The database each account lives in (`DB` or `ACCOUNTS_<n>`), and its API key's hash, so a
-- request finds its account's database with one read.
CREATE TABLE account_routes (
    account_id   TEXT PRIMARY KEY,
    binding      TEXT NOT NULL,
    api_key_hash TEXT NOT NULL UNIQUE,
    created_at   INTEGER NOT NULL
);

-- The account of every assigned number: a number is unique across every database here.
CREATE TABLE number_routes (
    phone_number TEXT PRIMARY KEY,
    account_id   TEXT NOT NULL
);

-- The account that sent each message with a carrier id, for accounts outside `DB`: written
-- before the send is recorded in the account's database, so a receipt always finds its way.
CREATE TABLE message_routes (
    carrier            TEXT NOT NULL,
    carrier_message_id TEXT NOT NULL,
    account_id         TEXT NOT NULL,
    PRIMARY KEY (carrier, carrier_message_id)
) WITHOUT ROWID;

-- Accounts and numbers from before routing live in `DB`; their routes say so.
INSERT OR IGNORE INTO account_routes (account_id, binding, api_key_hash, created_at)
    SELECT id, 'DB', api_key_hash, created_at FROM accounts;
INSERT OR IGNORE INTO number_routes (phone_number, account_id)
    SELECT phone_number, account_id FROM phone_numbers;
