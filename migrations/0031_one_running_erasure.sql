-- At most one running erasure per number and scope (docs/contract.md §5, "Erasure"): two requests
-- at once find the same record instead of starting two. A second one already running is ended
-- here: the first, which erases the same number in the same scope, goes on.
UPDATE erasures SET state = 'finished', finished_at = COALESCE(updated_at, created_at)
WHERE state = 'running' AND EXISTS (
    SELECT 1 FROM erasures o
    WHERE o.state = 'running' AND o.number_mac = erasures.number_mac AND o.account_id IS erasures.account_id
      AND (o.created_at < erasures.created_at OR (o.created_at = erasures.created_at AND o.id < erasures.id)));
CREATE UNIQUE INDEX erasures_one_running ON erasures (number_mac, IFNULL(account_id, ''))
    WHERE state = 'running';
