-- pg-0019-audit-by-database: the database writes the admin audit log, never the client. Every
-- change the admin role can make to a control_core table leaves its audit row, written by a
-- trigger whose function runs as the owner (SECURITY DEFINER); the admin role no longer holds
-- INSERT on admin_audit_log, nor INSERT/UPDATE on trigger_schedules (a publish resets a schedule
-- row through reset_schedule, which only follows a head that moved). Actor and time stay the
-- stamp's (pg-0015: session_user, the statement's database time). A client may give a reason in
-- the transaction-local setting control_core.audit_reason: a setting is written by the client, so
-- it is detail ("by", "change", "reason"), never identity.
-- control-core capability v18 / audit_by_database.

-- +goose Up
-- Audited actions of plain-SQL changes join those of the publisher; a Plugin Package and its
-- versions belong to no project, so their rows may have none.
ALTER TABLE control_core.admin_audit_log
    DROP CONSTRAINT admin_audit_log_action_check,
    ADD CONSTRAINT admin_audit_log_action_check CHECK (action IN (
        'project.create', 'project.pause', 'project.resume', 'project.update', 'project.lock',
        'task.publish', 'task.head', 'execution.publish', 'trigger.publish', 'trigger.head',
        'plugin.package', 'plugin.publish', 'plugin.version', 'plugin.bind', 'plugin.unbind')),
    ALTER COLUMN project_id DROP NOT NULL,
    ADD CONSTRAINT admin_audit_log_project_check CHECK (
        project_id IS NOT NULL OR action IN ('plugin.package', 'plugin.publish', 'plugin.version'));

-- The one writer of audit rows: called by the trigger functions below (which run as the owner),
-- executable by nobody else. The reason is the client's setting, bounded; '' when unset.
-- +goose StatementBegin
CREATE FUNCTION control_core.audit_write(p_action text, p_project_id text, p_subject text, p_detail jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog
AS $$
BEGIN
    INSERT INTO control_core.admin_audit_log (audit_id, action, project_id, subject, detail)
    VALUES (gen_random_uuid(), p_action, p_project_id, left(p_subject, 256), p_detail);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION control_core.audit_reason() RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog
AS $$ SELECT left(coalesce(current_setting('control_core.audit_reason', true), ''), 256) $$;
-- +goose StatementEnd

-- True when the row version with this xmin was written by the current (top-level) transaction: a
-- head or an execution revision whose revision row this transaction inserted is that publish's
-- change, audited once by the revision's row. A row written in a subtransaction does not match,
-- so such a change is audited twice rather than not at all.
-- +goose StatementBegin
CREATE FUNCTION control_core.audit_written_here(row_xmin xid) RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog
AS $$ SELECT row_xmin = pg_current_xact_id()::xid $$;
-- +goose StatementEnd

-- projects: a new project is project.create (detail "by": the reason, "sql" when none); an update
-- is project.pause or project.resume when it moves the state between active and paused, else
-- project.update. lock_project's FOR UPDATE is no update and fires nothing.
-- +goose StatementBegin
CREATE FUNCTION control_core.audit_projects() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog
AS $$
DECLARE
    v_reason text := control_core.audit_reason();
    v_action text := 'project.update';
    v_detail jsonb;
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM control_core.audit_write('project.create', NEW.project_id, NEW.project_id,
            jsonb_build_object('by', coalesce(nullif(v_reason, ''), 'sql'), 'state', NEW.state, 'revision', NEW.revision));
        RETURN NULL;
    END IF;
    IF OLD.state = 'active' AND NEW.state = 'paused' THEN
        v_action := 'project.pause';
    ELSIF OLD.state = 'paused' AND NEW.state = 'active' THEN
        v_action := 'project.resume';
    END IF;
    v_detail := jsonb_build_object('from', OLD.state, 'to', NEW.state, 'revision', NEW.revision);
    IF v_action = 'project.update' THEN
        v_detail := v_detail || jsonb_build_object('from_revision', OLD.revision, 'content_digest', NEW.content_digest);
    END IF;
    IF v_reason <> '' THEN
        v_detail := v_detail || jsonb_build_object('reason', v_reason);
    END IF;
    PERFORM control_core.audit_write(v_action, NEW.project_id, NEW.project_id, v_detail);
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER audit_projects AFTER INSERT OR UPDATE ON control_core.projects
    FOR EACH ROW EXECUTE FUNCTION control_core.audit_projects();

-- task_revisions: a new revision is task.publish (revision, the execution digest it pins).
-- +goose StatementBegin
CREATE FUNCTION control_core.audit_task_revisions() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog
AS $$
DECLARE
    v_reason text := control_core.audit_reason();
    v_detail jsonb;
BEGIN
    v_detail := jsonb_build_object('revision', NEW.revision, 'execution_digest',
        (SELECT e.digest FROM control_core.execution_revisions e WHERE e.execution_revision_id = NEW.execution_revision_id));
    IF v_reason <> '' THEN
        v_detail := v_detail || jsonb_build_object('reason', v_reason);
    END IF;
    PERFORM control_core.audit_write('task.publish', NEW.project_id, NEW.task_id, v_detail);
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER audit_task_revisions AFTER INSERT ON control_core.task_revisions
    FOR EACH ROW EXECUTE FUNCTION control_core.audit_task_revisions();

-- trigger_revisions: a new revision is trigger.publish, with its content, the fields that differ
-- from the revision before it (all of them for a first revision; the names of a publish result)
-- and "change": the reason ("sql" when none).
-- +goose StatementBegin
CREATE FUNCTION control_core.audit_trigger_revisions() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog
AS $$
DECLARE
    v_prev    control_core.trigger_revisions;
    v_changed jsonb := '[]';
BEGIN
    SELECT * INTO v_prev FROM control_core.trigger_revisions
     WHERE project_id = NEW.project_id AND trigger_id = NEW.trigger_id AND revision = NEW.revision - 1;
    IF NOT FOUND OR v_prev.task_id IS DISTINCT FROM NEW.task_id THEN
        v_changed := v_changed || '["task"]';
    END IF;
    IF NOT FOUND OR v_prev.task_revision IS DISTINCT FROM NEW.task_revision THEN
        v_changed := v_changed || '["task_revision"]';
    END IF;
    IF NOT FOUND OR v_prev.cron_spec IS DISTINCT FROM NEW.cron_spec THEN
        v_changed := v_changed || '["cron_spec"]';
    END IF;
    IF NOT FOUND OR v_prev.timezone IS DISTINCT FROM NEW.timezone THEN
        v_changed := v_changed || '["timezone"]';
    END IF;
    IF NOT FOUND OR v_prev.misfire_policy IS DISTINCT FROM NEW.misfire_policy THEN
        v_changed := v_changed || '["misfire_policy"]';
    END IF;
    IF NOT FOUND OR v_prev.misfire_grace_ms IS DISTINCT FROM NEW.misfire_grace_ms THEN
        v_changed := v_changed || '["misfire_grace_ms"]';
    END IF;
    IF NOT FOUND OR v_prev.enabled IS DISTINCT FROM NEW.enabled THEN
        v_changed := v_changed || '["enabled"]';
    END IF;
    PERFORM control_core.audit_write('trigger.publish', NEW.project_id, NEW.trigger_id, jsonb_build_object(
        'revision', NEW.revision, 'change', coalesce(nullif(control_core.audit_reason(), ''), 'sql'), 'changed', v_changed,
        'cron', NEW.cron_spec, 'timezone', NEW.timezone, 'misfire', NEW.misfire_policy,
        'misfire_grace_ms', NEW.misfire_grace_ms, 'enabled', NEW.enabled, 'task', NEW.task_id,
        'task_revision', NEW.task_revision));
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER audit_trigger_revisions AFTER INSERT ON control_core.trigger_revisions
    FOR EACH ROW EXECUTE FUNCTION control_core.audit_trigger_revisions();

-- tasks and triggers: a head that points, at commit, at a revision this transaction inserted is
-- that publish's own change (its revision's row audits it); any other head write (moved to an
-- older or foreign revision, rewritten in place) is task.head or trigger.head. Deferred, because a
-- publish moves the head before it inserts the revision (the heads' foreign keys are deferred too).
-- +goose StatementBegin
CREATE FUNCTION control_core.audit_heads() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog
AS $$
DECLARE
    v_xmin   xid;
    v_id     text;
    v_detail jsonb;
    v_reason text := control_core.audit_reason();
BEGIN
    IF TG_TABLE_NAME = 'tasks' THEN
        v_id := NEW.task_id;
        SELECT r.xmin INTO v_xmin FROM control_core.task_revisions r
         WHERE r.project_id = NEW.project_id AND r.task_id = NEW.task_id AND r.revision = NEW.head_revision;
    ELSE
        v_id := NEW.trigger_id;
        SELECT r.xmin INTO v_xmin FROM control_core.trigger_revisions r
         WHERE r.project_id = NEW.project_id AND r.trigger_id = NEW.trigger_id AND r.revision = NEW.head_revision;
    END IF;
    IF v_xmin IS NOT NULL AND control_core.audit_written_here(v_xmin) THEN
        RETURN NULL;
    END IF;
    v_detail := jsonb_build_object('op', lower(TG_OP), 'revision', NEW.head_revision);
    IF TG_OP = 'UPDATE' THEN
        v_detail := v_detail || jsonb_build_object('from_revision', OLD.head_revision);
    END IF;
    IF v_reason <> '' THEN
        v_detail := v_detail || jsonb_build_object('reason', v_reason);
    END IF;
    PERFORM control_core.audit_write(CASE TG_TABLE_NAME WHEN 'tasks' THEN 'task.head' ELSE 'trigger.head' END,
                                     NEW.project_id, v_id, v_detail);
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE CONSTRAINT TRIGGER audit_tasks AFTER INSERT OR UPDATE ON control_core.tasks
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION control_core.audit_heads();
CREATE CONSTRAINT TRIGGER audit_triggers AFTER INSERT OR UPDATE ON control_core.triggers
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION control_core.audit_heads();

-- execution_revisions: a new one pinned, at commit, by a task revision this transaction inserted
-- is part of that task.publish; one left unpinned is execution.publish (it runs nothing until a
-- task revision pins it, which is audited then).
-- +goose StatementBegin
CREATE FUNCTION control_core.audit_execution_revisions() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog
AS $$
DECLARE
    v_reason text := control_core.audit_reason();
    v_detail jsonb;
BEGIN
    IF EXISTS (SELECT 1 FROM control_core.task_revisions r
                WHERE r.execution_revision_id = NEW.execution_revision_id
                  AND control_core.audit_written_here(r.xmin)) THEN
        RETURN NULL;
    END IF;
    v_detail := jsonb_build_object('execution_revision_id', NEW.execution_revision_id, 'digest', NEW.digest);
    IF v_reason <> '' THEN
        v_detail := v_detail || jsonb_build_object('reason', v_reason);
    END IF;
    PERFORM control_core.audit_write('execution.publish', NEW.project_id, NEW.execution_revision_id::text, v_detail);
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE CONSTRAINT TRIGGER audit_execution_revisions AFTER INSERT ON control_core.execution_revisions
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION control_core.audit_execution_revisions();

-- The Plugin Package tables: every insert, update and delete. A package and its versions belong
-- to no project (plugin.package, plugin.publish for a new version, plugin.version for a changed or
-- deleted one); a binding is its project's (plugin.bind, plugin.unbind).
-- +goose StatementBegin
CREATE FUNCTION control_core.audit_plugins() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog
AS $$
DECLARE
    v_row    jsonb := to_jsonb(CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END);
    v_detail jsonb := jsonb_build_object('op', lower(TG_OP));
    v_reason text := control_core.audit_reason();
    v_action text;
    v_project text;
    v_subject text := v_row->>'package_id';
BEGIN
    IF TG_OP <> 'INSERT' THEN
        v_detail := v_detail || jsonb_build_object('from', to_jsonb(OLD) - 'manifest');
    END IF;
    IF TG_OP <> 'DELETE' THEN
        v_detail := v_detail || jsonb_build_object('to', to_jsonb(NEW) - 'manifest');
    END IF;
    IF v_reason <> '' THEN
        v_detail := v_detail || jsonb_build_object('reason', v_reason);
    END IF;
    CASE TG_TABLE_NAME
    WHEN 'plugin_packages' THEN
        v_action := 'plugin.package';
    WHEN 'plugin_package_versions' THEN
        v_action := CASE TG_OP WHEN 'INSERT' THEN 'plugin.publish' ELSE 'plugin.version' END;
        v_subject := v_subject || '@' || (v_row->>'version');
    ELSE
        v_action := CASE TG_OP WHEN 'DELETE' THEN 'plugin.unbind' ELSE 'plugin.bind' END;
        v_project := v_row->>'project_id';
    END CASE;
    PERFORM control_core.audit_write(v_action, v_project, v_subject, v_detail);
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER audit_plugin_packages AFTER INSERT OR UPDATE OR DELETE ON control_core.plugin_packages
    FOR EACH ROW EXECUTE FUNCTION control_core.audit_plugins();
CREATE TRIGGER audit_plugin_package_versions AFTER INSERT OR UPDATE OR DELETE ON control_core.plugin_package_versions
    FOR EACH ROW EXECUTE FUNCTION control_core.audit_plugins();
CREATE TRIGGER audit_project_plugin_bindings AFTER INSERT OR UPDATE OR DELETE ON control_core.project_plugin_bindings
    FOR EACH ROW EXECUTE FUNCTION control_core.audit_plugins();

-- The schedule row of a trigger whose head moved: cursor and claim cleared, state and claim
-- versions incremented (every claim under the old revision fails its fence), at the head
-- revision. It refuses a row already at the head, so it cannot reset a cursor on its own: the
-- head's move is what is audited (trigger.publish or trigger.head), and this follows it. The
-- admin role holds no INSERT or UPDATE on trigger_schedules: this is its only way to write one.
-- +goose StatementBegin
CREATE FUNCTION control_core.reset_schedule(p_project_id text, p_trigger_id text,
                                            OUT state_version bigint, OUT claim_version bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog
AS $$
#variable_conflict use_column
DECLARE
    v_head bigint;
BEGIN
    SELECT t.head_revision INTO v_head FROM control_core.triggers t
     WHERE t.project_id = p_project_id AND t.trigger_id = p_trigger_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'reset_schedule: trigger %/% does not exist', p_project_id, p_trigger_id USING ERRCODE = 'no_data_found';
    END IF;
    INSERT INTO control_core.trigger_schedules AS s (project_id, trigger_id, trigger_revision, next_fire_at_ms,
                                                     last_scheduled_at_ms, state_version, claim_version, updated_at_ms)
    VALUES (p_project_id, p_trigger_id, v_head, NULL, NULL, 1, 0, control_core.db_now_ms())
    ON CONFLICT (project_id, trigger_id) DO UPDATE
        SET trigger_revision    = EXCLUDED.trigger_revision,
            next_fire_at_ms     = NULL,
            claim_owner         = NULL,
            claim_token         = NULL,
            claim_expires_at_ms = NULL,
            claim_version       = s.claim_version + 1,
            state_version       = s.state_version + 1,
            updated_at_ms       = greatest(s.updated_at_ms, control_core.db_now_ms())
        WHERE s.trigger_revision <> EXCLUDED.trigger_revision
    RETURNING s.state_version, s.claim_version INTO state_version, claim_version;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'reset_schedule: the schedule of %/% is already at its head revision %', p_project_id, p_trigger_id, v_head
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
END
$$;
-- +goose StatementEnd

-- The audited lock of pg-0018, unchanged but for SECURITY DEFINER: it writes its own project.lock
-- row, which the admin role may no longer insert, so it runs as the owner.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION control_core.lock_project(p_project_id text, p_reason text) RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog
AS $$
DECLARE
    v_revision bigint;
BEGIN
    IF p_reason IS NULL OR length(p_reason) NOT BETWEEN 1 AND 256 THEN
        RAISE EXCEPTION 'lock_project: a reason of 1 to 256 characters is required' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT revision INTO v_revision FROM control_core.projects WHERE project_id = p_project_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'lock_project: project % does not exist', p_project_id USING ERRCODE = 'no_data_found';
    END IF;
    INSERT INTO control_core.admin_audit_log (audit_id, action, project_id, subject, detail)
    VALUES (gen_random_uuid(), 'project.lock', p_project_id, p_project_id,
            jsonb_build_object('reason', p_reason, 'revision', v_revision));
    RETURN v_revision;
END
$$;
-- +goose StatementEnd

REVOKE INSERT ON control_core.admin_audit_log FROM ql_admin;
REVOKE INSERT, UPDATE ON control_core.trigger_schedules FROM ql_admin;
GRANT EXECUTE ON FUNCTION control_core.reset_schedule(text, text) TO ql_admin;

SELECT control_core.advance_capability('control-core', 18, 'audit_by_database', 'pg-0019-audit-by-database');
