-- pg-0009-worker-sessions: the dispatcher's durable record of connected Workers. The scheduler
-- never writes here; placement keeps authority over Worker Sessions.
-- control-core capability v8 / worker_sessions.

-- +goose Up
CREATE TABLE control_core.worker_sessions (
    worker_session_id uuid    PRIMARY KEY,
    worker_id         text    NOT NULL CHECK (length(worker_id) BETWEEN 1 AND 128),
    state             text    NOT NULL CHECK (state IN ('active', 'draining', 'closed', 'expired')),
    capacity          integer NOT NULL CHECK (capacity >= 0),
    heartbeat_at_ms   bigint  NOT NULL CHECK (heartbeat_at_ms > 0),
    expires_at_ms     bigint  NOT NULL CHECK (expires_at_ms >= heartbeat_at_ms),
    created_at_ms     bigint  NOT NULL CHECK (created_at_ms > 0)
);
CREATE INDEX worker_sessions_worker_idx ON control_core.worker_sessions (worker_id) WHERE state = 'active';

CREATE INDEX attempts_worker_session_idx ON control_core.attempts (worker_session_id) WHERE worker_session_id IS NOT NULL;
ALTER TABLE control_core.attempts
    ADD CONSTRAINT attempts_worker_session_id_fkey FOREIGN KEY (worker_session_id)
    REFERENCES control_core.worker_sessions (worker_session_id);

SELECT control_core.advance_capability('control-core', 8, 'worker_sessions', 'pg-0009-worker-sessions');
