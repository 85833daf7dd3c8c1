package drifttest

// repair: changes whose --fix-sql must converge (issue 30, point 9).
var repair = []Case{
	// The schema's owner may drop or rename every object in it, and the old owner (the owner
	// role) loses its own USAGE with it: verify as the owner role still names the change.
	{Name: "the schema's owner changed to another role",
		SQL:    `CREATE ROLE {prefix}hijack NOLOGIN; ALTER SCHEMA control_core OWNER TO {prefix}hijack`,
		Object: "schema control_core is owned by", Runtime: true, PrivateRoles: true},
	{Name: "the schema's owner changed to the admin role",
		SQL: `ALTER SCHEMA control_core OWNER TO {admin}`, Object: "schema control_core is owned by", Runtime: true},
	// The functions follow the hijacked schema owner: read against the schema's owner they look
	// right, and the fix must give them back to the owner role, not to the schema's owner.
	{Name: "the schema and a function handed to the admin role",
		SQL: `ALTER SCHEMA control_core OWNER TO {admin};
		      ALTER FUNCTION control_core.db_now_ms() OWNER TO {admin}`,
		Object: "control_core.db_now_ms()", Runtime: true},
	{Name: "a function owned by another role than the schema's",
		SQL:    `ALTER SCHEMA control_core OWNER TO {admin}; ALTER FUNCTION control_core.db_now_ms() OWNER TO {worker}`,
		Object: "control_core.db_now_ms()", Runtime: true},
	// Inheritance either way, and a partition, each undone by its own statement.
	{Name: "a table in public inheriting from runs",
		SQL: `CREATE TABLE public.extra_runs () INHERITS (control_core.runs)`, Object: "public.extra_runs", Runtime: true},
	{Name: "runs inheriting from a table in public",
		SQL:    `CREATE TABLE public.parent_of_runs (); ALTER TABLE control_core.runs INHERIT public.parent_of_runs`,
		Object: "public.parent_of_runs", Runtime: true},
	{Name: "run_events attached as a partition of a table in public",
		SQL: `CREATE TABLE public.all_events (LIKE control_core.run_events) PARTITION BY LIST (type);
		      ALTER TABLE public.all_events ATTACH PARTITION control_core.run_events DEFAULT`,
		Object: "public.all_events", Runtime: true},
}
