-- A send whose answer was lost (docs/contract.md §4, "Sending"): 1 while an earlier try of an
-- outbound message may have reached its carrier without the answer reaching us (no answer, a
-- timeout, a gateway's 502/504, or a claim that ended without a result); 0 after a definite
-- answer. Only such a message is looked up at Twilio or Plivo before it is sent again.
ALTER TABLE messages ADD COLUMN answer_lost INTEGER NOT NULL DEFAULT 0;
-- Messages already between tries are treated as lost: a lookup where none was needed costs one
-- list, a send where one was needed costs a second SMS.
UPDATE messages SET answer_lost = 1
WHERE direction = 'outbound' AND carrier_message_id IS NULL AND status = 'sending' AND send_attempts > 0;
-- The messages of one sender to one recipient that could own a carrier id a lookup found: those
-- without an id, by when they were last tried.
CREATE INDEX messages_unconfirmed ON messages (carrier, from_number, to_number, updated_at)
    WHERE direction = 'outbound' AND carrier_message_id IS NULL;
