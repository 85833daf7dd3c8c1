package drifttest

// parameters: PostgreSQL 15's parameter privileges (GRANT SET | ALTER SYSTEM ON PARAMETER,
// pg_parameter_acl). SET on session_replication_role lets its holder turn off every trigger for
// its own writes (SET LOCAL session_replication_role = replica): the deferred run_attempt_agree,
// the guards and the audit triggers. CI runs PostgreSQL 15 to 18, where the catalog exists.
// PUBLIC is left out here: the test server is shared by the package's parallel tests, and a
// privilege of PUBLIC would be every other test's drift too.
var parameters = []Case{
	{Name: "SET on session_replication_role for the runtime role",
		SQL:    `GRANT SET ON PARAMETER session_replication_role TO {runtime}`,
		Undo:   `REVOKE SET ON PARAMETER session_replication_role FROM {runtime}`,
		Object: "session_replication_role", Runtime: true, PrivateRoles: true},
	{Name: "SET on session_replication_role through a group of the runtime role",
		SQL: `CREATE ROLE {prefix}replica NOLOGIN; GRANT SET ON PARAMETER session_replication_role TO {prefix}replica;
		      GRANT {prefix}replica TO {runtime}`,
		Undo:   `REVOKE SET ON PARAMETER session_replication_role FROM {prefix}replica`,
		Object: "through membership in", Runtime: true, PrivateRoles: true},
	// The admin's own writes lose their triggers: verify's drift; replicas start.
	{Name: "SET on session_replication_role for the admin role (not the runtime's)",
		SQL:    `GRANT SET ON PARAMETER session_replication_role TO {admin}`,
		Undo:   `REVOKE SET ON PARAMETER session_replication_role FROM {admin}`,
		Object: "session_replication_role", Runtime: false, PrivateRoles: true},
	// ALTER SYSTEM changes the parameter for the runtime's sessions too, whoever holds it.
	{Name: "ALTER SYSTEM on a parameter for the admin role",
		SQL:    `GRANT ALTER SYSTEM ON PARAMETER work_mem TO {admin}`,
		Undo:   `REVOKE ALTER SYSTEM ON PARAMETER work_mem FROM {admin}`,
		Object: "parameter work_mem", Runtime: true, PrivateRoles: true},
}
