-- pg-0026-lock-order: a publish no longer deadlocks with an admit of its project.
-- The admit locks its schedule row (FOR UPDATE OF s) and then inserts the Run, whose foreign key
-- on projects takes FOR KEY SHARE of the project row at the statement's end. A publish takes the
-- audited project lock first and then waits for the schedule row in reset_schedule. lock_project
-- took the project row FOR UPDATE, which conflicts with FOR KEY SHARE: each waited for the other,
-- and PostgreSQL aborted one (40P01: `qlsched trigger disable` failed beside a running replica).
-- FOR NO KEY UPDATE still conflicts with itself, with FOR SHARE and with every UPDATE of the
-- project row, so publishes, bindings and pauses of one project stay serialised, but it lets the
-- foreign-key checks of admits, run-now and audit rows through. Nothing else changes.
-- control-core capability v25 / lock_order.

-- +goose Up

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
    SELECT revision INTO v_revision FROM control_core.projects WHERE project_id = p_project_id FOR NO KEY UPDATE;
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

SELECT control_core.advance_capability('control-core', 25, 'lock_order', 'pg-0026-lock-order');
