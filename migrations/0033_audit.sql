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
