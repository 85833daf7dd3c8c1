-- pg-0013-role-baseline: PUBLIC gets nothing in control_core, now or for objects created later.
-- control-core capability v12 / role_baseline.

-- +goose Up
REVOKE ALL ON SCHEMA control_core FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA control_core FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA control_core FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA control_core FROM PUBLIC;
-- Functions are executable by PUBLIC by default; for functions the owner creates from now on, not.
ALTER DEFAULT PRIVILEGES FOR ROLE ql_owner REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;

SELECT control_core.advance_capability('control-core', 12, 'role_baseline', 'pg-0013-role-baseline');
