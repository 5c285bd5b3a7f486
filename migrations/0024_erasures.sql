-- Erasures (docs/contract.md §5, "Erasure"): the record that one phone number's data was erased,
-- in `DB`. The number itself is not kept: `number_mac` is HMAC-SHA256 of it under ADMIN_TOKEN
-- (hex), so an operator who knows a number can tell whether it was erased, and nobody else can
-- read it back. `counts` is the answer's JSON object of what was erased.
CREATE TABLE erasures (
    id         TEXT    PRIMARY KEY,
    number_mac TEXT    NOT NULL,
    account_id TEXT,
    counts     TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX erasures_number ON erasures (number_mac);
