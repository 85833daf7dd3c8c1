package drifttest

// enforcement: what an index or relation enforces beside its definition, and the whole schema
// with no exclusions (issue 30, points 1 and 4).
var enforcement = []Case{
	// Point 1: catalog switches that no definition renders. Each is a superuser's UPDATE of a
	// catalog; pg_get_indexdef and pg_get_constraintdef read the same before and after.
	{Name: "runs' indexes no longer maintained (relhasindex off)",
		SQL:    `UPDATE pg_catalog.pg_class SET relhasindex = false WHERE oid = 'control_core.runs'::regclass`,
		Object: "control_core.runs", Runtime: true},
	{Name: "runs' CHECK constraints no longer evaluated (relchecks 0)",
		SQL:    `UPDATE pg_catalog.pg_class SET relchecks = 0 WHERE oid = 'control_core.runs'::regclass`,
		Object: "control_core.runs", Runtime: true},
	{Name: "attempts' triggers no longer fire (relhastriggers off)",
		SQL:    `UPDATE pg_catalog.pg_class SET relhastriggers = false WHERE oid = 'control_core.attempts'::regclass`,
		Object: "control_core.attempts", Runtime: true},
	{Name: "the occurrence key's check deferred (indimmediate off)",
		SQL:    `UPDATE pg_catalog.pg_index SET indimmediate = false WHERE indexrelid = 'control_core.runs_occurrence_key'::regclass`,
		Object: "runs_occurrence_key", Runtime: true},
	{Name: "the occurrence key no longer unique (indisunique off)",
		SQL:    `UPDATE pg_catalog.pg_index SET indisunique = false WHERE indexrelid = 'control_core.runs_occurrence_key'::regclass`,
		Object: "runs_occurrence_key", Runtime: true},
	{Name: "a foreign key's check trigger deferred to commit (tginitdeferred)",
		SQL: `UPDATE pg_catalog.pg_trigger SET tgdeferrable = true, tginitdeferred = true
		      WHERE tgrelid = 'control_core.attempts'::regclass AND tgconstraint =
		            (SELECT oid FROM pg_catalog.pg_constraint WHERE conname = 'attempts_run_id_fkey')`,
		Object: "attempts_run_id_fkey", Runtime: true},
	{Name: "a CHECK constraint taken for an inherited one (coninhcount)",
		SQL: `UPDATE pg_catalog.pg_constraint SET coninhcount = 1
		      WHERE conrelid = 'control_core.runs'::regclass AND conname = 'runs_state_check'`,
		Object: "runs_state_check", Runtime: true},
	// The index a key checks writes with, moved under its constraint (pg_get_constraintdef reads
	// conkey, writes read indkey), and a column's default hidden from INSERT (atthasdef).
	{Name: "the occurrence key's index moved to other columns (indkey)",
		SQL: `UPDATE pg_catalog.pg_index SET indkey = (SELECT pg_catalog.string_agg(attnum::text, ' ' ORDER BY attnum)
		      FROM pg_catalog.pg_attribute WHERE attrelid = 'control_core.runs'::regclass
		        AND attname IN ('project_id', 'task_id', 'task_revision'))::pg_catalog.int2vector
		      WHERE indexrelid = 'control_core.runs_occurrence_key'::regclass`, // text, text, bigint as the key's own
		Object: "runs_occurrence_key", Runtime: true},
	{Name: "a referenced primary key's index moved to another uuid column (indkey)",
		SQL: `UPDATE pg_catalog.pg_index SET indkey = (SELECT attnum::text FROM pg_catalog.pg_attribute
		      WHERE attrelid = 'control_core.runs'::regclass AND attname = 'execution_revision_id')::pg_catalog.int2vector
		      WHERE indexrelid = 'control_core.runs_pkey'::regclass`, // attempts and run_events refer to it
		Object: "runs_pkey", Runtime: true},
	{Name: "a column's default hidden from INSERT (atthasdef off)",
		SQL: `UPDATE pg_catalog.pg_attribute SET atthasdef = false
		      WHERE attrelid = 'control_core.runs'::regclass AND attname = 'created_at_ms'`,
		Object: "control_core.runs", Runtime: true},

	// Point 4: goose's version table and the rest of the schema. A trigger, rule or policy on
	// the version table runs inside the next `qlmigrate up`, as the owner.
	{Name: "a trigger on goose's version table",
		SQL: `CREATE FUNCTION public.on_version() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
		      CREATE TRIGGER on_version AFTER INSERT ON control_core.goose_db_version FOR EACH ROW EXECUTE FUNCTION public.on_version()`,
		Object: "on_version", Runtime: true},
	{Name: "a rule on goose's version table",
		SQL:    `CREATE RULE keep_versions AS ON INSERT TO control_core.goose_db_version DO INSTEAD NOTHING`,
		Object: "keep_versions", Runtime: true},
	{Name: "a policy on goose's version table",
		SQL:    `CREATE POLICY hide_versions ON control_core.goose_db_version USING (false)`,
		Object: "hide_versions", Runtime: true},
	{Name: "goose's id sequence capped",
		SQL: `DO $$ BEGIN EXECUTE pg_catalog.format('ALTER SEQUENCE control_core.goose_db_version_id_seq MAXVALUE %s',
		      (SELECT last_value FROM control_core.goose_db_version_id_seq)); END $$`, // the next migration cannot record itself
		Object: "control_core.goose_db_version_id_seq", Runtime: true},
}
