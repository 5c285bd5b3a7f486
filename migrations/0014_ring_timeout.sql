-- How long each of a number's ring targets rings before the carrier ends its leg unanswered.
ALTER TABLE phone_numbers ADD COLUMN ring_timeout_secs INTEGER NOT NULL DEFAULT 30
    CHECK (ring_timeout_secs BETWEEN 5 AND 120);
