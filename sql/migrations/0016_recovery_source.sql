-- pg-0016-recovery-source: the index startup recovery scans. Recovery looks at runtime-owned Runs
-- that are still queued or dispatching and at each one's newest Attempt (served backwards by the
-- attempts (run_id, attempt_no) unique index).
-- control-core capability v15 / recovery_source.

-- +goose Up
CREATE INDEX runs_recovery_idx ON control_core.runs (queued_at_ms, run_id)
    WHERE owner = 'runtime' AND state IN ('queued', 'dispatching');

SELECT control_core.advance_capability('control-core', 15, 'recovery_source', 'pg-0016-recovery-source');
