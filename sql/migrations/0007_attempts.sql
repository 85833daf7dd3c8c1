-- pg-0007-attempts: execution Attempts of a Run. Admission creates attempt 1 as a claimed
-- remote_worker Attempt with every dispatch field at its initial (NULL) value.
-- control-core capability v6 / attempts.

-- +goose Up
CREATE TABLE control_core.attempts (
    attempt_id          uuid    PRIMARY KEY,
    run_id              uuid    NOT NULL REFERENCES control_core.runs (run_id),
    attempt_no          integer NOT NULL CHECK (attempt_no >= 1),
    executor_kind       text    NOT NULL CHECK (executor_kind IN ('remote_worker')),
    state               text    NOT NULL CHECK (state IN ('claimed', 'dispatching', 'running', 'succeeded', 'failed', 'cancelled', 'expired')),
    worker_id           text,
    worker_session_id   uuid,
    run_lease_id        uuid,
    offer_id            uuid,
    callback_token_hash text    CHECK (callback_token_hash ~ '^[0-9a-f]{64}$'),
    started_at_ms       bigint,
    finished_at_ms      bigint,
    result              jsonb,
    error               jsonb,
    created_at_ms       bigint  NOT NULL CHECK (created_at_ms > 0),
    updated_at_ms       bigint  NOT NULL CHECK (updated_at_ms >= created_at_ms),
    UNIQUE (run_id, attempt_no)
);

SELECT control_core.advance_capability('control-core', 6, 'attempts', 'pg-0007-attempts');
