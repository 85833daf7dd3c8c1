-- pg-0010-run-leases: execution leases a dispatcher grants an Attempt on a Worker Session.
-- control-core capability v9 / run_leases.

-- +goose Up
CREATE TABLE control_core.run_leases (
    run_lease_id      uuid   PRIMARY KEY,
    attempt_id        uuid   NOT NULL REFERENCES control_core.attempts (attempt_id),
    worker_session_id uuid   NOT NULL REFERENCES control_core.worker_sessions (worker_session_id),
    lease_version     bigint NOT NULL CHECK (lease_version >= 1),
    state             text   NOT NULL CHECK (state IN ('active', 'released', 'expired')),
    granted_at_ms     bigint NOT NULL CHECK (granted_at_ms > 0),
    expires_at_ms     bigint NOT NULL CHECK (expires_at_ms > granted_at_ms)
);
-- At most one active lease per Attempt.
CREATE UNIQUE INDEX run_leases_active_attempt_idx ON control_core.run_leases (attempt_id) WHERE state = 'active';
CREATE INDEX run_leases_worker_session_idx ON control_core.run_leases (worker_session_id);

CREATE INDEX attempts_run_lease_idx ON control_core.attempts (run_lease_id) WHERE run_lease_id IS NOT NULL;
ALTER TABLE control_core.attempts
    ADD CONSTRAINT attempts_run_lease_id_fkey FOREIGN KEY (run_lease_id)
    REFERENCES control_core.run_leases (run_lease_id);

SELECT control_core.advance_capability('control-core', 9, 'run_leases', 'pg-0010-run-leases');
