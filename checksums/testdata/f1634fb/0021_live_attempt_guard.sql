-- pg-0021-live-attempt-guard: what pg-0020 (applied as it stands) left to close, in a migration of
-- its own because an applied migration is never edited (issue 37).
-- control-core capability v20 / live_attempt_guard.

-- +goose Up

-- ---- the console overview's per-project due index goes
-- pg-0020 added trigger_schedules_project_due_idx for the overview's per-project due walk. On
-- PostgreSQL 18 the planner skip-scans it for the hot claim (ClaimDue) and the backlog gauge,
-- sorting the whole due range instead of walking trigger_schedules_claim_idx in order; the 18
-- matrix's plan tests caught it. Every update that moves a cursor also paid one more B-tree insert
-- for it. The walks use the claim index again (docs/operations.md says what that costs).
DROP INDEX control_core.trigger_schedules_project_due_idx;

-- ---- a Run made live again without its Attempt
-- pg-0020's attempts_keep_live_run_attempt keeps a live Run's Attempt. The same shape by the other
-- door: a Run made live again (back to queued or dispatching, or back to the runtime owner) after
-- its Attempts were removed while it was not live, which neither recovery index of pg-0020 finds.
-- A runtime Run that becomes queued or dispatching by an UPDATE must have an Attempt; a Run already
-- live keeps its own (the trigger above), so only the change into the live states is checked.
-- +goose StatementBegin
CREATE FUNCTION control_core.runs_keep_live_attempt() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog
AS $$
BEGIN
    IF NEW.owner = 'runtime' AND NEW.state IN ('queued', 'dispatching')
       AND NOT (OLD.owner = 'runtime' AND OLD.state IN ('queued', 'dispatching'))
       AND NOT EXISTS (SELECT 1 FROM control_core.attempts a WHERE a.run_id = NEW.run_id) THEN
        RAISE EXCEPTION 'runs: Run % has no Attempt and cannot become a runtime-owned queued or dispatching Run', NEW.run_id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER runs_keep_live_attempt BEFORE UPDATE OF state, owner ON control_core.runs
    FOR EACH ROW EXECUTE FUNCTION control_core.runs_keep_live_attempt();

SELECT control_core.advance_capability('control-core', 20, 'live_attempt_guard', 'pg-0021-live-attempt-guard');
