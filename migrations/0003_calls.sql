-- Calls and the legs a sequential ring dials. Times are Unix milliseconds.

CREATE TABLE calls (
    id              TEXT    PRIMARY KEY,
    account_id      TEXT    NOT NULL REFERENCES accounts (id),
    direction       TEXT    NOT NULL CHECK (direction IN ('inbound', 'outbound')),
    from_number     TEXT    NOT NULL,
    to_number       TEXT    NOT NULL,
    status          TEXT    NOT NULL CHECK (status IN ('ringing', 'in_progress', 'completed', 'missed')),
    carrier         TEXT    NOT NULL,
    -- The carrier's session (all legs of the call) and the caller's leg.
    call_session_id TEXT    NOT NULL,
    call_control_id TEXT    NOT NULL,
    call_leg_id     TEXT    NOT NULL,
    answered_at     INTEGER,
    ended_at        INTEGER,
    duration_secs   INTEGER,
    billed_minutes  INTEGER,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    UNIQUE (carrier, call_session_id)
);
CREATE INDEX calls_account_page ON calls (account_id, created_at DESC, id DESC);
CREATE INDEX calls_caller_leg ON calls (carrier, call_control_id);

CREATE TABLE call_legs (
    id              TEXT    PRIMARY KEY,
    call_id         TEXT    NOT NULL REFERENCES calls (id),
    position        INTEGER NOT NULL,
    target          TEXT    NOT NULL,
    call_control_id TEXT,
    call_leg_id     TEXT,
    outcome         TEXT    NOT NULL CHECK (outcome IN ('dialing', 'answered', 'no_answer', 'canceled')),
    hangup_cause    TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL,
    UNIQUE (call_id, position)
);
