-- pg-0015-database-time (ADR-0107): time comes from the database, never from a node. One
-- function gives the statement's observation in epoch milliseconds; every *_ms column that records
-- "when this row was written" defaults to it.
-- control-core capability v14 / database_time.

-- +goose Up
-- statement_timestamp(): one observation per statement, the same for every row it touches.
-- Every name is schema-qualified instead of pinned with SET search_path: a function with a SET
-- clause is never inlined and each call saves and restores the setting, and the claim evaluates
-- this once per row it walks (perf showed it at 4 % of the database's CPU under load). Inlined,
-- it is the bare expression.
CREATE FUNCTION control_core.db_now_ms() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT pg_catalog.floor(EXTRACT(epoch FROM pg_catalog.statement_timestamp()) OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8 $$;

ALTER TABLE control_core.projects            ALTER COLUMN created_at_ms SET DEFAULT control_core.db_now_ms(),
                                             ALTER COLUMN updated_at_ms SET DEFAULT control_core.db_now_ms();
ALTER TABLE control_core.execution_revisions ALTER COLUMN created_at_ms SET DEFAULT control_core.db_now_ms();
ALTER TABLE control_core.tasks               ALTER COLUMN created_at_ms SET DEFAULT control_core.db_now_ms(),
                                             ALTER COLUMN updated_at_ms SET DEFAULT control_core.db_now_ms();
ALTER TABLE control_core.task_revisions      ALTER COLUMN created_at_ms SET DEFAULT control_core.db_now_ms();
ALTER TABLE control_core.triggers            ALTER COLUMN created_at_ms SET DEFAULT control_core.db_now_ms(),
                                             ALTER COLUMN updated_at_ms SET DEFAULT control_core.db_now_ms();
ALTER TABLE control_core.trigger_revisions   ALTER COLUMN created_at_ms SET DEFAULT control_core.db_now_ms();
ALTER TABLE control_core.runs                ALTER COLUMN created_at_ms SET DEFAULT control_core.db_now_ms(),
                                             ALTER COLUMN updated_at_ms SET DEFAULT control_core.db_now_ms();
ALTER TABLE control_core.attempts            ALTER COLUMN created_at_ms SET DEFAULT control_core.db_now_ms(),
                                             ALTER COLUMN updated_at_ms SET DEFAULT control_core.db_now_ms();
ALTER TABLE control_core.run_events          ALTER COLUMN at_ms SET DEFAULT control_core.db_now_ms();
ALTER TABLE control_core.migration_ledger    ALTER COLUMN applied_at_ms SET DEFAULT control_core.db_now_ms();

-- The admin audit log's actor and time are the database's, not the caller's: a BEFORE INSERT
-- trigger overwrites whatever an INSERT gives (the authenticated session user, the statement's
-- time), and the columns have no defaults, so with the trigger disabled an insert fails instead
-- of trusting the caller.
-- +goose StatementBegin
CREATE FUNCTION control_core.admin_audit_log_stamp() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog
AS $$
BEGIN
    NEW.actor := session_user;
    NEW.at_ms := control_core.db_now_ms();
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER admin_audit_log_stamp BEFORE INSERT ON control_core.admin_audit_log
    FOR EACH ROW EXECUTE FUNCTION control_core.admin_audit_log_stamp();

SELECT control_core.advance_capability('control-core', 14, 'database_time', 'pg-0015-database-time');
