-- How far a move has copied (docs/scaling.md, "Moving virtual shards"): in the database the
-- shards arrive in, the highest id of the source that the move has visited, from its first row
-- on without a gap. A call that names a later starting point starts here instead, and the move
-- is marked copied only by a call that went on from here, so no row is skipped.
ALTER TABLE shard_moves ADD COLUMN copied_through INTEGER NOT NULL DEFAULT 0;
