-- An erasure's steps by name (docs/contract.md §5, "Erasure"): a JSON array such as
-- ["messages:DB", "calls:DB", "ring_targets:DB", "carrier_events:DB"], written by its first page.
-- `step` and `marks` index this list, so a deploy that binds another database while an erasure
-- runs moves no step: a database bound since is added at the end, one no longer bound is skipped.
-- Empty: the list of the bindings as they are (an erasure recorded before this migration).
ALTER TABLE erasures ADD COLUMN plan TEXT NOT NULL DEFAULT '[]';
