-- The running audit (docs/contract.md, "The running audit"): each check's place in the rows it
-- reads (the id of the last row it checked), how many rows it has checked and how many findings
-- it has raised, and when it last ran. One row per check, in every database with accounts.
CREATE TABLE audit_checks (
    name     TEXT    PRIMARY KEY,
    position INTEGER NOT NULL DEFAULT 0,
    checked  INTEGER NOT NULL DEFAULT 0,
    found    INTEGER NOT NULL DEFAULT 0,
    ran_at   INTEGER
);
INSERT INTO audit_checks (name) VALUES ('status_order'), ('charges'), ('one_success');
INSERT INTO audit_checks (name) VALUES ('deliveries');

-- When an endpoint's subscriptions last changed: the `deliveries` check holds an event against
-- the endpoints subscribed to its type since well before it was written. Before this column,
-- any change of an endpoint moved `updated_at`, so that is where each row's starts.
ALTER TABLE webhook_endpoints ADD COLUMN types_at INTEGER NOT NULL DEFAULT 0;
UPDATE webhook_endpoints SET types_at = updated_at;

-- GET /admin/audit: the newest violations, through an index of their own.
CREATE INDEX outbound_events_audit ON outbound_events (created_at DESC, id DESC) WHERE type = 'audit.violation';
