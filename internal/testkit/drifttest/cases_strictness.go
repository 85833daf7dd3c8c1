package drifttest

// strictness: readiness as strict as the docs, and what a least-privileged role may do without
// stopping the fleet (issue 30, points 7 and 8). Point 8 also turned issue 16's two large-object
// cases (firstRound) into Runtime: false.
var strictness = []Case{
	// Point 7: whatever lets a role read or change what the runtime uses refuses a replica, by
	// whichever route: a column's grant, or a predefined role that no grant on the tables shows.
	{Name: "a column-level UPDATE on runs for the admin role",
		SQL: `GRANT UPDATE (cancel_requested_at_ms) ON control_core.runs TO {admin}`, Object: "control_core.runs (cancel_requested_at_ms)", Runtime: true},
	{Name: "a column-level SELECT on the schedules for a LOGIN role",
		SQL:    `CREATE ROLE {prefix}reader LOGIN; GRANT SELECT (claim_owner) ON control_core.trigger_schedules TO {prefix}reader`,
		Object: "control_core.trigger_schedules (claim_owner)", Runtime: true, PrivateRoles: true},
	{Name: "a LOGIN role made a member of pg_write_all_data",
		SQL: `CREATE ROLE {prefix}writer LOGIN; GRANT CONNECT ON DATABASE {db} TO {prefix}writer;
		      GRANT pg_write_all_data TO {prefix}writer`,
		Object: "writer is a member of pg_write_all_data", Runtime: true, PrivateRoles: true},
	{Name: "a LOGIN role made a member of pg_read_all_data through a group",
		SQL: `CREATE ROLE {prefix}readers NOLOGIN; GRANT pg_read_all_data TO {prefix}readers;
		      CREATE ROLE {prefix}via_readers LOGIN; GRANT CONNECT ON DATABASE {db} TO {prefix}via_readers;
		      GRANT {prefix}readers TO {prefix}via_readers`,
		Object: "readers is a member of pg_read_all_data", Runtime: true, PrivateRoles: true},
	{Name: "the admin role made a member of pg_write_all_data",
		SQL: `GRANT pg_write_all_data TO {admin}`, Object: "is a member of pg_write_all_data", Runtime: true, PrivateRoles: true},

	// Point 8: what any role may create or hand out without a privilege of control-core, about
	// objects the runtime never uses, is verify's drift; replicas start.
	{Name: "a large object granted to the runtime role",
		SQL:    `DO $$ BEGIN EXECUTE format('GRANT SELECT ON LARGE OBJECT %s TO {runtime}', pg_catalog.lo_from_bytea(0, 'x')); END $$`,
		Object: "large object", Runtime: false},
	{Name: "a table in public granted to the runtime role",
		SQL: `CREATE TABLE public.mine (x int); GRANT SELECT ON public.mine TO {runtime}`, Object: "public.mine", Runtime: false},
}
