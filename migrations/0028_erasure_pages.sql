-- Erasures run in pages (docs/contract.md §5, "Erasure"): a job per page, the cursor in the row.
-- `step` is the index of the step it is in (docs/contract.md §5, "Erasure", lists them: each account
-- database's messages, calls and numbers, then each dedupe database's carrier events), `after_row`
-- the last row id that step has read; `pass` 1 reads every row, pass 2 (the tail) reads only the
-- rows written since pass 1 read its step, whose ends `marks` holds (a JSON array, one per step).
-- An erasure recorded before this migration finished in its one request.
ALTER TABLE erasures ADD COLUMN state TEXT NOT NULL DEFAULT 'finished';
ALTER TABLE erasures ADD COLUMN pass INTEGER NOT NULL DEFAULT 1;
ALTER TABLE erasures ADD COLUMN step INTEGER NOT NULL DEFAULT 0;
ALTER TABLE erasures ADD COLUMN after_row INTEGER NOT NULL DEFAULT 0;
ALTER TABLE erasures ADD COLUMN marks TEXT NOT NULL DEFAULT '[]';
ALTER TABLE erasures ADD COLUMN pages INTEGER NOT NULL DEFAULT 0;
ALTER TABLE erasures ADD COLUMN updated_at INTEGER;
ALTER TABLE erasures ADD COLUMN finished_at INTEGER;
-- A second request for a number while its erasure runs finds that one.
CREATE INDEX erasures_running ON erasures (number_mac) WHERE state = 'running';
