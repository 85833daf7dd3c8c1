-- pg-0025-definition-lifecycle (issue 34, items 3 and 7): a trigger run now, a trigger archived,
-- old Runs pruned. Three SECURITY DEFINER functions, EXECUTE for the admin role only: the admin
-- role keeps no INSERT on runs and no DELETE anywhere in the loop, and the runtime gets nothing.
-- Cost: one empty table and two triggers that fire on a publish's head update and on a schedule
-- row's INSERT only (never on a claim or an admit, which update); one index built on run_leases.
-- control-core capability v24 / definition_lifecycle.

-- +goose Up

-- ---- audited actions
ALTER TABLE control_core.admin_audit_log
    DROP CONSTRAINT admin_audit_log_action_check,
    ADD CONSTRAINT admin_audit_log_action_check CHECK (action IN (
        'project.create', 'project.pause', 'project.resume', 'project.update', 'project.lock',
        'task.publish', 'task.head', 'execution.publish', 'trigger.publish', 'trigger.head',
        'plugin.package', 'plugin.publish', 'plugin.version', 'plugin.bind', 'plugin.unbind',
        'worker_token.create', 'worker_token.revoke', 'run.cancel',
        'trigger.run_now', 'trigger.archive', 'run.prune'));

-- ---- archived triggers
-- A trigger archived is gone from every list (they all start from its schedule row, which the
-- archive deletes) and never claimed again (no schedule row, none can be inserted again); its
-- head, revisions, Runs and audit rows stay. Its own table rather than a column of triggers, so
-- archiving is no head write (audit_triggers would audit it as trigger.head).
CREATE TABLE control_core.archived_triggers (
    project_id     text   NOT NULL,
    trigger_id     text   NOT NULL,
    -- the head revision when it was archived
    revision       bigint NOT NULL CHECK (revision >= 1),
    archived_at_ms bigint NOT NULL CHECK (archived_at_ms > 0),
    PRIMARY KEY (project_id, trigger_id),
    FOREIGN KEY (project_id, trigger_id) REFERENCES control_core.triggers (project_id, trigger_id),
    FOREIGN KEY (project_id, trigger_id, revision)
        REFERENCES control_core.trigger_revisions (project_id, trigger_id, revision)
);

-- An archived trigger's head never moves again (a publish, a rollout, an apply: they all bump the
-- head first) and its schedule row never comes back (reset_schedule inserts it). Definer, so the
-- check reads archived_triggers whatever the writer's grants.
-- +goose StatementBegin
CREATE FUNCTION control_core.archived_trigger_guard() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog
AS $$
BEGIN
    -- A schedule row's insert waits for an archive in flight (it holds the trigger FOR UPDATE), so
    -- the check below, a statement of its own, sees the archive once it has committed.
    IF TG_TABLE_NAME = 'trigger_schedules' THEN
        PERFORM 1 FROM control_core.triggers t
          WHERE t.project_id = NEW.project_id AND t.trigger_id = NEW.trigger_id FOR SHARE;
    END IF;
    IF EXISTS (SELECT 1 FROM control_core.archived_triggers a
                WHERE a.project_id = NEW.project_id AND a.trigger_id = NEW.trigger_id) THEN
        RAISE EXCEPTION 'trigger %/% is archived: it is never published or scheduled again (publish under a new trigger id)',
            NEW.project_id, NEW.trigger_id
            USING ERRCODE = 'object_not_in_prerequisite_state', HINT = 'archived_trigger';
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER archived_trigger_guard BEFORE UPDATE ON control_core.triggers
    FOR EACH ROW EXECUTE FUNCTION control_core.archived_trigger_guard();
CREATE TRIGGER archived_trigger_guard BEFORE INSERT ON control_core.trigger_schedules
    FOR EACH ROW EXECUTE FUNCTION control_core.archived_trigger_guard();

-- Archive a trigger: its schedule row deleted (a claim in flight then admits nothing: its row is
-- gone), the archive recorded, one trigger.archive audit row. Idempotent: an archived trigger
-- comes back with already = true and nothing written. An unknown one is no_data_found.
-- +goose StatementBegin
CREATE FUNCTION control_core.archive_trigger(p_project_id text, p_trigger_id text)
RETURNS TABLE (revision bigint, archived_at_ms bigint, already boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog
AS $$
#variable_conflict use_column
DECLARE
    v_head bigint;
    v_at   bigint;
    v_rev  bigint;
    v_now  bigint := control_core.db_now_ms();
    v_by   text := coalesce(nullif(control_core.audit_reason(), ''), 'sql');
BEGIN
    SELECT t.head_revision INTO v_head FROM control_core.triggers t
     WHERE t.project_id = p_project_id AND t.trigger_id = p_trigger_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'archive_trigger: trigger %/% does not exist', p_project_id, p_trigger_id USING ERRCODE = 'no_data_found';
    END IF;
    SELECT a.revision, a.archived_at_ms INTO v_rev, v_at FROM control_core.archived_triggers a
     WHERE a.project_id = p_project_id AND a.trigger_id = p_trigger_id;
    IF FOUND THEN
        RETURN QUERY SELECT v_rev, v_at, true;
        RETURN;
    END IF;
    DELETE FROM control_core.trigger_schedules s WHERE s.project_id = p_project_id AND s.trigger_id = p_trigger_id;
    INSERT INTO control_core.archived_triggers (project_id, trigger_id, revision, archived_at_ms)
    VALUES (p_project_id, p_trigger_id, v_head, v_now);
    PERFORM control_core.audit_write('trigger.archive', p_project_id, p_trigger_id,
                                     jsonb_build_object('revision', v_head, 'by', v_by));
    RETURN QUERY SELECT v_head, v_now, false;
END
$$;
-- +goose StatementEnd

-- ---- run now
-- One Run of a trigger's head revision, now, through the admission's checks written with the same
-- functions (pg-0014's trigger_fires; the digests recomputed by project_digest, trigger_digest,
-- task_digest and execution_digest): the project active, the head revision firing, every digest
-- recomputing to the stored one, the pinned execution a remote worker's. The Run is a manual one
-- (no trigger columns, owner operator), keyed ql3:now:v1:<trigger>:<revision>:<request>, which no
-- cron key can equal; with its claimed Attempt and its run.created and run.queued events, as an
-- admission writes them, so the dispatcher places it like any queued Run. The trigger's schedule
-- row (cursor, fence) is not touched. The same request again returns its Run (already = true).
-- +goose StatementBegin
CREATE FUNCTION control_core.run_now(p_project_id text, p_trigger_id text, p_request uuid, p_reason text)
RETURNS TABLE (run_id uuid, trigger_revision bigint, idempotency_key text, already boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog
AS $$
#variable_conflict use_column
DECLARE
    v_now    bigint := control_core.db_now_ms();
    v_reason text := coalesce(p_reason, '');
    v_by     text := coalesce(nullif(control_core.audit_reason(), ''), 'sql');
    v_p      record;
    v_head   bigint;
    v_tr     record;
    v_kr     record;
    v_er     record;
    v_key    text;
    v_run    uuid;
BEGIN
    IF length(v_reason) > 256 THEN
        RAISE EXCEPTION 'run_now: a reason is at most 256 characters' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_request IS NULL THEN
        RAISE EXCEPTION 'run_now: a request id is required' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- the project first, shared, as an admission's diagnosis reads it
    SELECT p.state, p.revision, p.content_digest INTO v_p FROM control_core.projects p
     WHERE p.project_id = p_project_id FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run_now: project % does not exist', p_project_id USING ERRCODE = 'no_data_found';
    END IF;
    SELECT t.head_revision INTO v_head FROM control_core.triggers t
     WHERE t.project_id = p_project_id AND t.trigger_id = p_trigger_id FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run_now: trigger %/% does not exist', p_project_id, p_trigger_id USING ERRCODE = 'no_data_found';
    END IF;
    IF EXISTS (SELECT 1 FROM control_core.archived_triggers a
                WHERE a.project_id = p_project_id AND a.trigger_id = p_trigger_id) THEN
        RAISE EXCEPTION 'run_now: trigger %/% is archived', p_project_id, p_trigger_id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    v_key := 'ql3:now:v1:' || p_trigger_id || ':' || v_head::text || ':' || p_request::text;
    SELECT r.run_id INTO v_run FROM control_core.runs r
     WHERE r.project_id = p_project_id AND r.idempotency_key = v_key;
    IF FOUND THEN
        RETURN QUERY SELECT v_run, v_head, v_key, true;
        RETURN;
    END IF;
    IF v_p.state <> 'active' THEN
        RAISE EXCEPTION 'run_now: project % is %, not active', p_project_id, v_p.state
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF v_p.content_digest <> control_core.project_digest(p_project_id, v_p.state, v_p.revision) THEN
        RAISE EXCEPTION 'run_now: project % revision % does not recompute to its content digest', p_project_id, v_p.revision
            USING ERRCODE = 'data_corrupted';
    END IF;
    SELECT tr.* INTO v_tr FROM control_core.trigger_revisions tr
     WHERE tr.project_id = p_project_id AND tr.trigger_id = p_trigger_id AND tr.revision = v_head;
    IF NOT control_core.trigger_fires(v_tr.kind, v_tr.enabled) THEN
        RAISE EXCEPTION 'run_now: trigger %/% revision % is disabled', p_project_id, p_trigger_id, v_head
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF v_tr.content_digest <> control_core.trigger_digest(v_tr.kind, v_tr.cron_spec, v_tr.timezone, v_tr.misfire_policy,
                                                          v_tr.misfire_grace_ms, v_tr.enabled, v_tr.task_id, v_tr.task_revision) THEN
        RAISE EXCEPTION 'run_now: trigger %/% revision % does not recompute to its content digest', p_project_id, p_trigger_id, v_head
            USING ERRCODE = 'data_corrupted';
    END IF;
    SELECT kr.* INTO v_kr FROM control_core.task_revisions kr
     WHERE kr.project_id = p_project_id AND kr.task_id = v_tr.task_id AND kr.revision = v_tr.task_revision;
    SELECT er.* INTO v_er FROM control_core.execution_revisions er
     WHERE er.execution_revision_id = v_kr.execution_revision_id;
    IF v_er.digest <> control_core.execution_digest(v_er.spec) THEN
        RAISE EXCEPTION 'run_now: execution revision % does not recompute to its digest', v_er.execution_revision_id
            USING ERRCODE = 'data_corrupted';
    END IF;
    IF v_kr.content_digest <> control_core.task_digest(v_kr.task_id, v_kr.revision, v_er.execution_revision_id, v_er.digest,
                                                       v_kr.max_attempts, v_kr.retry_backoff_ms, v_kr.worker_selector) THEN
        RAISE EXCEPTION 'run_now: task %/% revision % does not recompute to its content digest', p_project_id, v_kr.task_id, v_kr.revision
            USING ERRCODE = 'data_corrupted';
    END IF;
    IF v_er.executor_kind <> 'remote_worker' THEN
        RAISE EXCEPTION 'run_now: task %/% revision % runs a % execution, not a remote worker''s', p_project_id, v_kr.task_id,
            v_kr.revision, v_er.executor_kind USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    v_run := gen_random_uuid();
    INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id, idempotency_key,
                                   state, owner, queued_at_ms, created_at_ms, updated_at_ms)
    VALUES (v_run, p_project_id, v_kr.task_id, v_kr.revision, v_er.execution_revision_id, v_key,
            'queued', 'operator', v_now, v_now, v_now);
    INSERT INTO control_core.attempts (attempt_id, run_id, attempt_no, executor_kind, state, created_at_ms, updated_at_ms)
    VALUES (gen_random_uuid(), v_run, 1, 'remote_worker', 'claimed', v_now, v_now);
    INSERT INTO control_core.run_events (event_id, run_id, seq, type, at_ms, detail)
    VALUES (gen_random_uuid(), v_run, 1, 'run.created', v_now,
            jsonb_build_object('by', v_by, 'reason', v_reason, 'trigger_id', p_trigger_id, 'trigger_revision', v_head)),
           (gen_random_uuid(), v_run, 2, 'run.queued', v_now, '{}');
    PERFORM control_core.audit_write('trigger.run_now', p_project_id, p_trigger_id,
                                     jsonb_build_object('run_id', v_run, 'revision', v_head, 'request', p_request,
                                                        'by', v_by, 'reason', v_reason));
    RETURN QUERY SELECT v_run, v_head, v_key, false;
END
$$;
-- +goose StatementEnd

-- ---- prune
-- One batch of a project's terminal Runs (succeeded, failed, cancelled) finished before
-- now - older_than_ms, deleted with everything that names them: attempts, run_events, run_leases,
-- dispatch_offers. A Run with a live Attempt or an active lease (a running Run cancelled: its
-- worker has not reported yet) is never taken. Attempts and leases/offers name each other, so the
-- batch is one statement: the foreign keys are checked at its end. older_than_ms below one hour,
-- or a batch outside 1..10000, is refused. One run.prune audit row per batch that deleted
-- something. dry_run: counts the batch, deletes nothing, writes nothing. more: a full batch
-- (the caller calls again, in a new transaction).
-- +goose StatementBegin
CREATE FUNCTION control_core.prune_runs(p_project_id text, p_older_than_ms bigint, p_batch integer, p_dry_run boolean)
RETURNS TABLE (runs bigint, attempts bigint, events bigint, leases bigint, offers bigint, cutoff_ms bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog
AS $$
#variable_conflict use_column
DECLARE
    v_cutoff bigint;
    v_ids    uuid[];
    v_r bigint; v_a bigint; v_e bigint; v_l bigint; v_o bigint;
    v_by     text := coalesce(nullif(control_core.audit_reason(), ''), 'sql');
BEGIN
    IF p_older_than_ms IS NULL OR p_older_than_ms < 3600000 THEN
        RAISE EXCEPTION 'prune_runs: older_than_ms % is below one hour (3600000)', p_older_than_ms
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_dry_run IS NULL THEN
        RAISE EXCEPTION 'prune_runs: dry_run is NULL (true counts, false deletes)' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_batch IS NULL OR p_batch < 1 OR p_batch > 10000 THEN
        RAISE EXCEPTION 'prune_runs: batch % is outside 1..10000', p_batch USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM control_core.projects p WHERE p.project_id = p_project_id) THEN
        RAISE EXCEPTION 'prune_runs: project % does not exist', p_project_id USING ERRCODE = 'no_data_found';
    END IF;
    v_cutoff := control_core.db_now_ms() - p_older_than_ms;
    SELECT coalesce(array_agg(x.run_id), '{}') INTO v_ids FROM (
        SELECT r.run_id FROM control_core.runs r
         WHERE r.project_id = p_project_id AND r.state IN ('succeeded', 'failed', 'cancelled')
           AND r.finished_at_ms < v_cutoff
           AND NOT EXISTS (SELECT 1 FROM control_core.attempts a
                            WHERE a.run_id = r.run_id AND a.state IN ('claimed', 'dispatching', 'running'))
           AND NOT EXISTS (SELECT 1 FROM control_core.run_leases l WHERE l.run_id = r.run_id AND l.state = 'active')
         ORDER BY r.finished_at_ms, r.run_id
         LIMIT p_batch
         FOR UPDATE OF r SKIP LOCKED) x;
    IF p_dry_run OR cardinality(v_ids) = 0 THEN
        RETURN QUERY SELECT cardinality(v_ids)::bigint,
            (SELECT count(*) FROM control_core.attempts a WHERE a.run_id = ANY (v_ids)),
            (SELECT count(*) FROM control_core.run_events e WHERE e.run_id = ANY (v_ids)),
            (SELECT count(*) FROM control_core.run_leases l WHERE l.run_id = ANY (v_ids)),
            (SELECT count(*) FROM control_core.dispatch_offers o
              WHERE o.attempt_id IN (SELECT a.attempt_id FROM control_core.attempts a WHERE a.run_id = ANY (v_ids))),
            v_cutoff;
        RETURN;
    END IF;
    WITH att AS (SELECT a.attempt_id FROM control_core.attempts a WHERE a.run_id = ANY (v_ids)),
    off AS (DELETE FROM control_core.dispatch_offers o WHERE o.attempt_id IN (SELECT attempt_id FROM att) RETURNING 1),
    lea AS (DELETE FROM control_core.run_leases l WHERE l.run_id = ANY (v_ids) RETURNING 1),
    evt AS (DELETE FROM control_core.run_events e WHERE e.run_id = ANY (v_ids) RETURNING 1),
    atd AS (DELETE FROM control_core.attempts a WHERE a.run_id = ANY (v_ids) RETURNING 1),
    run AS (DELETE FROM control_core.runs r WHERE r.run_id = ANY (v_ids) RETURNING 1)
    SELECT (SELECT count(*) FROM run), (SELECT count(*) FROM atd), (SELECT count(*) FROM evt),
           (SELECT count(*) FROM lea), (SELECT count(*) FROM off)
      INTO v_r, v_a, v_e, v_l, v_o;
    PERFORM control_core.audit_write('run.prune', p_project_id, p_project_id,
                                     jsonb_build_object('runs', v_r, 'attempts', v_a, 'events', v_e, 'leases', v_l,
                                                        'offers', v_o, 'cutoff_ms', v_cutoff,
                                                        'older_than_ms', p_older_than_ms, 'by', v_by));
    RETURN QUERY SELECT v_r, v_a, v_e, v_l, v_o, v_cutoff;
END
$$;
-- +goose StatementEnd

-- The foreign keys of run_leases (run_id → runs, (attempt_id, run_id) → attempts) had only
-- partial indexes (active leases) behind them: each pruned Run and Attempt scanned the whole lease
-- history. One index serves both checks. It blocks writes to run_leases while it is built.
CREATE INDEX run_leases_run_attempt_idx ON control_core.run_leases (run_id, attempt_id);

-- ---- grants (roles/model.go v24 holds the same)
GRANT SELECT ON control_core.archived_triggers TO ql_admin;
GRANT EXECUTE ON FUNCTION control_core.archive_trigger(text, text),
                          control_core.run_now(text, text, uuid, text),
                          control_core.prune_runs(text, bigint, integer, boolean)
    TO ql_admin;

SELECT control_core.advance_capability('control-core', 24, 'definition_lifecycle', 'pg-0025-definition-lifecycle');
