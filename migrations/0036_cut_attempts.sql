-- An attempt the platform cut short (docs/contract.md, "Retries"): sent with less than the
-- attempt timeout left in its invocation and given no answer before that time ran out. It is
-- recorded in `webhook_attempts` like any attempt, under its own number, and counted here: it
-- spends none of the delivery's attempts (the retry schedule and exhaustion count
-- `attempts - cut`) and is never held against the endpoint (its failure streak, its circuit).
ALTER TABLE webhook_deliveries ADD COLUMN cut INTEGER NOT NULL DEFAULT 0;
