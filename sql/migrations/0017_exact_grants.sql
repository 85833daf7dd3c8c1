-- pg-0017-exact-grants: re-verify the four non-privileged LOGIN roles, then install the exact
-- database, schema, table and function privileges. qlmigrate verify compares the catalogs with
-- this model (roles/model.go holds the same model as data); anything missing or extra is drift.
-- control-core capability v16 / exact_grants.

-- +goose Up
-- +goose StatementBegin
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT want.rolname, a.rolcanlogin, a.rolsuper, a.rolcreatedb, a.rolcreaterole, a.rolreplication, a.rolbypassrls
          FROM unnest(ARRAY['ql_owner', 'ql_admin', 'ql_runtime', 'ql_worker_ingress']) AS want(rolname)
          LEFT JOIN pg_catalog.pg_roles a ON a.rolname = want.rolname
    LOOP
        IF r.rolcanlogin IS NULL THEN
            RAISE EXCEPTION 'pg-0017-exact-grants: role % is missing; run "qlmigrate roles create" first', r.rolname;
        END IF;
        IF NOT r.rolcanlogin THEN
            RAISE EXCEPTION 'pg-0017-exact-grants: role % must be a LOGIN role', r.rolname;
        END IF;
        IF r.rolsuper OR r.rolcreatedb OR r.rolcreaterole OR r.rolreplication OR r.rolbypassrls THEN
            RAISE EXCEPTION 'pg-0017-exact-grants: role % must be NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS', r.rolname;
        END IF;
    END LOOP;
    -- The runtime and admin roles connect; ql_worker_ingress gets nothing, not even CONNECT.
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO ql_admin, ql_runtime', current_database());
END
$$;
-- +goose StatementEnd

GRANT USAGE ON SCHEMA control_core TO ql_admin, ql_runtime;

-- read by both: readiness and the revisions admission re-verifies
GRANT SELECT ON control_core.capabilities,
                control_core.projects,
                control_core.execution_revisions,
                control_core.tasks,
                control_core.task_revisions,
                control_core.triggers,
                control_core.trigger_revisions,
                control_core.trigger_schedules,
                control_core.runs,
                control_core.attempts,
                control_core.run_events,
                control_core.worker_sessions,
                control_core.run_leases,
                control_core.dispatch_offers
    TO ql_admin, ql_runtime;

-- the publisher: projects, tasks, triggers and their revisions; creates and resets schedule rows
GRANT INSERT, UPDATE ON control_core.projects, control_core.tasks, control_core.triggers,
                        control_core.trigger_schedules
    TO ql_admin;
GRANT INSERT ON control_core.execution_revisions, control_core.task_revisions,
                control_core.trigger_revisions
    TO ql_admin;
GRANT SELECT, INSERT ON control_core.admin_audit_log TO ql_admin;

-- the runtime: advances and fences schedules (no INSERT, no DELETE), admits Runs, recovers them,
-- and keeps the dispatcher's durable contract
GRANT UPDATE ON control_core.trigger_schedules TO ql_runtime;
GRANT INSERT, UPDATE ON control_core.runs, control_core.attempts,
                        control_core.worker_sessions, control_core.run_leases, control_core.dispatch_offers
    TO ql_runtime;
GRANT INSERT ON control_core.run_events TO ql_runtime;

GRANT EXECUTE ON FUNCTION control_core.db_now_ms() TO ql_admin, ql_runtime;
-- the rule functions (digests, idempotency key, fence, claimable): inlined into the queries of
-- both roles, and an inlined function still needs EXECUTE
GRANT EXECUTE ON FUNCTION control_core.project_digest(text, text, bigint),
                          control_core.execution_digest(jsonb),
                          control_core.task_digest(text, bigint, uuid, text),
                          control_core.trigger_digest(text, text, text, text, bigint, boolean, text, bigint),
                          control_core.cron_idempotency_key(text, bigint, bigint),
                          control_core.claim_fence_holds(text, uuid, bigint, bigint, text, uuid, bigint, bigint),
                          control_core.trigger_fires(text, boolean),
                          control_core.schedule_claimable(text, boolean, uuid, bigint, bigint)
    TO ql_admin, ql_runtime;

SELECT control_core.advance_capability('control-core', 16, 'exact_grants', 'pg-0017-exact-grants');
