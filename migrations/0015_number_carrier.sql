-- The carrier a number belongs to: messages from it are sent through that carrier's API. Set by
-- the operator, or learned from the first message that arrives for the number.
ALTER TABLE phone_numbers ADD COLUMN carrier TEXT CHECK (carrier IN ('telnyx', 'twilio', 'plivo'));
