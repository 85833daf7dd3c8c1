-- pg-0006-runs: durable Runs. A scheduled occurrence becomes exactly one Run, keyed by its
-- idempotency key ql3:cron:v1:<triggerId>:<triggerRevision>:<scheduledForMs>. Trigger ids are
-- unique within a project only, so the key is unique per project: two projects' triggers of the
-- same name each get their occurrences. The table guards both rules itself, so a role that may
-- insert Runs cannot forge a second Run for an occurrence: a triggered Run's key must be the one
-- its own columns spell, and a trigger has at most one Run per scheduled time (whatever the
-- revision).
-- control-core capability v5 / runs.

-- +goose Up
-- The idempotency key of a cron occurrence, written once: the table's CHECK, the admission and
-- the bench all spell it through this function.
CREATE FUNCTION control_core.cron_idempotency_key(trigger_id text, trigger_revision bigint,
                                                  scheduled_for_ms bigint) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT 'ql3:cron:v1:' || trigger_id || ':' || trigger_revision::pg_catalog.text || ':' || scheduled_for_ms::pg_catalog.text $$;

CREATE TABLE control_core.runs (
    run_id                 uuid   PRIMARY KEY,
    project_id             text   NOT NULL REFERENCES control_core.projects (project_id),
    task_id                text   NOT NULL,
    task_revision          bigint NOT NULL,
    execution_revision_id  uuid   NOT NULL REFERENCES control_core.execution_revisions (execution_revision_id),
    trigger_id             text,
    trigger_revision       bigint,
    scheduled_for_ms       bigint CHECK (scheduled_for_ms >= 0),
    idempotency_key        text   NOT NULL CHECK (length(idempotency_key) BETWEEN 1 AND 256),
    state                  text   NOT NULL CHECK (state IN ('queued', 'dispatching', 'running', 'succeeded', 'failed', 'cancelled')),
    -- 'runtime': admitted by the scheduler, recovered by the runtime; 'operator': started by hand.
    owner                  text   NOT NULL CHECK (owner IN ('runtime', 'operator')),
    queued_at_ms           bigint,
    cancel_requested_at_ms bigint,
    finished_at_ms         bigint,
    created_at_ms          bigint NOT NULL CHECK (created_at_ms > 0),
    updated_at_ms          bigint NOT NULL CHECK (updated_at_ms >= created_at_ms),
    CONSTRAINT runs_idempotency_key_key UNIQUE (project_id, idempotency_key),
    FOREIGN KEY (project_id, task_id, task_revision)
        REFERENCES control_core.task_revisions (project_id, task_id, revision),
    FOREIGN KEY (project_id, trigger_id, trigger_revision)
        REFERENCES control_core.trigger_revisions (project_id, trigger_id, revision),
    -- A triggered run names its trigger, revision and occurrence; a manual run names none of them.
    CHECK ((trigger_id IS NULL) = (trigger_revision IS NULL) AND (trigger_id IS NULL) = (scheduled_for_ms IS NULL)),
    CHECK (state <> 'queued' OR queued_at_ms IS NOT NULL),
    CONSTRAINT runs_cron_key_check CHECK (trigger_id IS NULL OR idempotency_key =
        control_core.cron_idempotency_key(trigger_id, trigger_revision, scheduled_for_ms)),
    -- a Run started by hand cannot take a cron occurrence's key, and block its admission
    CONSTRAINT runs_manual_key_check CHECK (trigger_id IS NOT NULL OR idempotency_key NOT LIKE 'ql3:cron:%'),
    -- One Run per occurrence; its index also serves "the newest Runs of a trigger" (scanned
    -- backwards), so no separate index is needed.
    CONSTRAINT runs_occurrence_key UNIQUE (project_id, trigger_id, scheduled_for_ms)
);
-- A Run's identity never changes once written: otherwise an UPDATE could move a Run off its
-- occurrence (or make it a manual one) and free the occurrence for a second Run. Its state,
-- owner and times are what the runtime, the dispatcher and an operator update.
-- +goose StatementBegin
CREATE FUNCTION control_core.runs_identity_guard() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog
AS $$
BEGIN
    IF (NEW.run_id, NEW.project_id, NEW.task_id, NEW.task_revision, NEW.execution_revision_id, NEW.trigger_id,
        NEW.trigger_revision, NEW.scheduled_for_ms, NEW.idempotency_key)
       IS DISTINCT FROM
       (OLD.run_id, OLD.project_id, OLD.task_id, OLD.task_revision, OLD.execution_revision_id, OLD.trigger_id,
        OLD.trigger_revision, OLD.scheduled_for_ms, OLD.idempotency_key) THEN
        RAISE EXCEPTION 'runs: the identity of Run % (its project, task, trigger, occurrence and key) cannot change', OLD.run_id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER runs_identity_guard BEFORE UPDATE ON control_core.runs
    FOR EACH ROW EXECUTE FUNCTION control_core.runs_identity_guard();

CREATE INDEX runs_task_revision_idx ON control_core.runs (project_id, task_id, task_revision);
CREATE INDEX runs_execution_revision_idx ON control_core.runs (execution_revision_id);
-- A project's Runs by admission time: the console's runs pages (keyset, newest first) and its
-- admissions per minute of the last hour (internal/console, sql/queries/console.sql).
CREATE INDEX runs_project_created_idx ON control_core.runs (project_id, created_at_ms, run_id);

SELECT control_core.advance_capability('control-core', 5, 'runs', 'pg-0006-runs');
