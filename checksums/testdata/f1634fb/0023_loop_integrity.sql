-- pg-0023-loop-integrity (issue 32, hostile review s6): what pg-0022 left open. The Run/Attempt
-- agreement (I1) is also checked when an Attempt is inserted or renumbered, not only when a state
-- changes; a lease's Run is its Attempt's Run (a composite foreign key, so "one active lease per
-- Run" counts a column the database checks); and a hand-back (a draining worker returning its
-- job) no longer uses up an attempt: it runs again at once, bounded by max_hand_backs() per Run.
-- Cost: one unique index build on attempts (a scan, and one more B-tree entry per Attempt); the
-- foreign key is validated against run_leases (docs/operations.md, upgrade).
-- control-core capability v22 / loop_integrity.

-- +goose Up

-- ---- I1 on insert and renumbering
-- pg-0022 fired on UPDATE OF state only, so an INSERT of a newer Attempt (a succeeded attempt 2
-- under a running Run, a claimed one under a succeeded Run) was never seen. Same function, same
-- name, deferred to COMMIT: admission and a retry insert their Attempt and update the Run in one
-- transaction, and commit a pair that agrees. attempt_no and run_id decide which Attempt is newest.
DROP TRIGGER run_attempt_agree ON control_core.attempts;
CREATE CONSTRAINT TRIGGER run_attempt_agree AFTER INSERT OR UPDATE OF state, attempt_no, run_id ON control_core.attempts
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION control_core.run_attempt_agree();

-- ---- a lease's Run is its Attempt's Run
-- run_leases.run_id was copied from the Attempt and checked by nothing, so the unique "one active
-- lease per Run" (run_leases_live_run_idx) could count a lease under another Run. Refuse first,
-- with a message, if a database already holds such a lease; then the key, validated.
-- +goose StatementBegin
DO $$
DECLARE
    v_lease uuid;
BEGIN
    SELECT l.run_lease_id INTO v_lease FROM control_core.run_leases l
      JOIN control_core.attempts a ON a.attempt_id = l.attempt_id
     WHERE a.run_id <> l.run_id LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'pg-0023-loop-integrity: lease % names a Run other than its Attempt''s; find its writer before upgrading', v_lease
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
END
$$;
-- +goose StatementEnd
CREATE UNIQUE INDEX attempts_attempt_run_idx ON control_core.attempts (attempt_id, run_id);
ALTER TABLE control_core.run_leases
    ADD CONSTRAINT run_leases_attempt_run_fkey FOREIGN KEY (attempt_id, run_id)
        REFERENCES control_core.attempts (attempt_id, run_id) NOT VALID;
ALTER TABLE control_core.run_leases VALIDATE CONSTRAINT run_leases_attempt_run_fkey;

-- ---- a hand-back is not an attempt
-- The most hand-backs a Run may have before the next one fails it (a worker that hands every job
-- back must not loop a Run for ever). One place for the number.
CREATE FUNCTION control_core.max_hand_backs() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 16 $$;

-- When a finished Attempt's Run runs again; NULL for no retry. hand_backs is how many of the Run's
-- earlier Attempts were handed back; they do not count against max_attempts. succeeded and
-- cancelled: never. handed_back: at once, unless the Run already has max_hand_backs(). Otherwise
-- the attempt counted (attempt_no - hand_backs) is the last one allowed, or the retry waits
-- backoff × 2^(counted-1), capped at 24 h (the shift is capped too: 2^30 × 1 ms exceeds the cap).
-- Replaces pg-0022's 5-argument form, which counted a hand-back as an attempt.
DROP FUNCTION control_core.retry_at_ms(text, integer, integer, bigint, bigint);
CREATE FUNCTION control_core.retry_at_ms(outcome text, attempt_no integer, hand_backs integer, max_attempts integer,
                                         backoff_ms bigint, now_ms bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT CASE WHEN outcome OPERATOR(pg_catalog.=) 'succeeded' OR outcome OPERATOR(pg_catalog.=) 'cancelled' THEN NULL
                  WHEN outcome OPERATOR(pg_catalog.=) 'handed_back'
                  THEN CASE WHEN hand_backs OPERATOR(pg_catalog.<) control_core.max_hand_backs() THEN now_ms END
                  WHEN (attempt_no OPERATOR(pg_catalog.-) hand_backs) OPERATOR(pg_catalog.>=) max_attempts THEN NULL
                  ELSE now_ms OPERATOR(pg_catalog.+) LEAST(
                       backoff_ms OPERATOR(pg_catalog.*) (1::pg_catalog.int8 OPERATOR(pg_catalog.<<)
                           LEAST(GREATEST((attempt_no OPERATOR(pg_catalog.-) hand_backs) OPERATOR(pg_catalog.-) 1, 0), 30)),
                       86400000::pg_catalog.int8) END $$;

-- ---- grants (roles/model.go v22 holds the same)
GRANT EXECUTE ON FUNCTION control_core.max_hand_backs(),
                          control_core.retry_at_ms(text, integer, integer, integer, bigint, bigint)
    TO ql_admin, ql_runtime;

SELECT control_core.advance_capability('control-core', 22, 'loop_integrity', 'pg-0023-loop-integrity');
