-- Recoveries (docs/contract.md §6, "Recovery"): one row per `POST .../recover`, which delivers
-- again what an endpoint missed in a window, a page of at most 1,000 of the account's events at a
-- time, each page a job of its own. `after_created_at`/`after_id` is the last event of the last
-- page (NULL before the first); a page is taken only from where the row says, so a page run twice
-- moves it once. `queued` counts the deliveries written; `finished_at` is set by the last page.
CREATE TABLE endpoint_recoveries (
    id               TEXT    PRIMARY KEY,
    account_id       TEXT    NOT NULL,
    endpoint_id      TEXT    NOT NULL,
    since            INTEGER NOT NULL,
    until            INTEGER NOT NULL,
    after_created_at INTEGER,
    after_id         TEXT,
    queued           INTEGER NOT NULL DEFAULT 0,
    finished_at      INTEGER,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL
);
