-- pg-0020-bounded-reads: indexes that keep the operator reads, the replica's startup recovery and
-- the metrics scrape bounded as history grows (100,000 triggers, millions of Runs).
-- control-core capability v19 / bounded_reads.

-- +goose Up

-- ---- operator reads (status, runs list, trigger list, task list, console overview)
-- runs list --state: a project's Runs in one state, newest first, as one backward range (across
-- projects: one range per project, merged). Without it a state that matches nothing walked the
-- project's whole history through runs_project_created_idx. It costs every admit one more B-tree
-- insert into runs (and every state change one, which is never HOT anyway: runs_recovery_drift_idx's
-- predicate names state).
CREATE INDEX runs_project_state_created_idx ON control_core.runs (project_id, state, created_at_ms, run_id);

-- The console overview's per-project backlog: a project's due range in claim order, as one range
-- of this index (ConsoleProjects walks at most its cap of rows per project). Through
-- trigger_schedules_claim_idx, whose first column is the cursor, each project's walk read every
-- project's due rows and kept its own. The cursor is in trigger_schedules_claim_idx already, so
-- an update that moves it (init, admit, skip) was never HOT; a claim, which moves no cursor,
-- stays HOT.
CREATE INDEX trigger_schedules_project_due_idx
    ON control_core.trigger_schedules (project_id, (coalesce(next_fire_at_ms, -1)));

-- ---- startup recovery source
-- The source excludes the pristine shape admission leaves (a queued Run, not cancelled, whose one
-- Attempt is attempt 1, claimed, remote_worker, every dispatch field NULL), so its cost follows
-- the Runs that left that shape, not the admitted history. The shape spans two tables, so it is
-- two partial indexes, and RecoveryCandidates reads their union (and then checks the exact
-- shape): runtime-owned live Runs whose own row left it, and Attempts that left it. pg-0016's
-- runs_recovery_idx held every queued Run (millions, none of which the source wants); nothing
-- else reads it, and every admission paid for its entry, so it goes.
CREATE INDEX runs_recovery_drift_idx ON control_core.runs (run_id)
    WHERE owner = 'runtime' AND (state = 'dispatching'
          OR (state = 'queued' AND (cancel_requested_at_ms IS NOT NULL OR queued_at_ms IS NULL)));
CREATE INDEX attempts_recovery_drift_idx ON control_core.attempts (run_id)
    WHERE NOT (attempt_no = 1 AND state = 'claimed' AND executor_kind = 'remote_worker'
               AND worker_id IS NULL AND worker_session_id IS NULL AND run_lease_id IS NULL AND offer_id IS NULL
               AND callback_token_hash IS NULL AND started_at_ms IS NULL AND finished_at_ms IS NULL
               AND result IS NULL AND error IS NULL);
DROP INDEX control_core.runs_recovery_idx;

-- The one shape no index on attempts can find is a live Run with no Attempt at all. Admission
-- writes the Run and its Attempt in one statement, and no role of the model may DELETE an
-- Attempt; this trigger closes the owner's (and a superuser's) path too: an Attempt of a
-- runtime-owned queued or dispatching Run is never deleted, moved to another Run, or truncated
-- away. What is left is a writer that inserts a runtime Run without its Attempt (docs/operations.md,
-- Startup recovery).
-- +goose StatementBegin
CREATE FUNCTION control_core.attempts_keep_live_run_attempt() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog
AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        IF EXISTS (SELECT 1 FROM control_core.runs r
                   WHERE r.owner = 'runtime' AND r.state IN ('queued', 'dispatching')) THEN
            RAISE EXCEPTION 'attempts: cannot truncate while runtime-owned Runs are queued or dispatching (startup recovery needs their Attempts)'
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        RETURN NULL;
    END IF;
    IF (TG_OP = 'DELETE' OR NEW.run_id IS DISTINCT FROM OLD.run_id)
       AND EXISTS (SELECT 1 FROM control_core.runs r
                   WHERE r.run_id = OLD.run_id AND r.owner = 'runtime' AND r.state IN ('queued', 'dispatching')) THEN
        RAISE EXCEPTION 'attempts: Attempt % of runtime-owned Run % cannot be removed while the Run is queued or dispatching', OLD.attempt_id, OLD.run_id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER attempts_keep_live_run_attempt BEFORE DELETE OR UPDATE OF run_id ON control_core.attempts
    FOR EACH ROW EXECUTE FUNCTION control_core.attempts_keep_live_run_attempt();
CREATE TRIGGER attempts_keep_live_run_attempt_truncate BEFORE TRUNCATE ON control_core.attempts
    FOR EACH STATEMENT EXECUTE FUNCTION control_core.attempts_keep_live_run_attempt();

SELECT control_core.advance_capability('control-core', 19, 'bounded_reads', 'pg-0020-bounded-reads');
