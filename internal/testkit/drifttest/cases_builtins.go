package drifttest

// builtins: the pg_catalog functions the schema depends on (issue 30, point 6).
var builtins = []Case{
	// db_now_ms() is statement_timestamp() in epoch milliseconds (pg-0015): every *_ms default
	// and the claim's lease expiry shift by three hours.
	{Name: "the statement clock shifted by hours",
		SQL: `CREATE OR REPLACE FUNCTION pg_catalog.statement_timestamp() RETURNS timestamptz LANGUAGE sql STABLE
		      AS $$ SELECT pg_catalog.now() + interval '3 hours' $$`,
		Object: "pg_catalog.statement_timestamp()", Runtime: true},
	// The digests of the rule functions (pg-0003 on) are encode(sha256(convert_to(…))).
	{Name: "sha256 returning a constant",
		SQL:    `CREATE OR REPLACE FUNCTION pg_catalog.sha256(bytea) RETURNS bytea LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$ SELECT '\x00'::bytea $$`,
		Object: "pg_catalog.sha256(bytea)", Runtime: true},
	// db_now_ms() multiplies with OPERATOR(pg_catalog.*) on double precision.
	{Name: "an operator pointed at another function",
		SQL: `UPDATE pg_catalog.pg_operator SET oprcode = 'pg_catalog.float8pl'::pg_catalog.regproc
		      WHERE oid = 'pg_catalog.*(double precision,double precision)'::pg_catalog.regoperator`,
		Object: "pg_catalog.*(double precision,double precision)", Runtime: true},
	{Name: "a built-in made SECURITY DEFINER",
		SQL: `ALTER FUNCTION pg_catalog.convert_to(text, name) SECURITY DEFINER`, Object: "pg_catalog.convert_to(text, name)", Runtime: true},
	// floor(integer) did not exist: floor(1) resolved to floor(double precision), now to this.
	{Name: "an overload created in pg_catalog",
		SQL:    `CREATE FUNCTION pg_catalog.floor(integer) RETURNS integer LANGUAGE sql IMMUTABLE AS $$ SELECT 0 $$`,
		Object: "pg_catalog.floor(integer)", Runtime: true},
	// btree text_ops' comparison is what every unique index on text compares keys with
	// (control_core.runs_occurrence_key among them): strpos lets duplicates in.
	{Name: "a btree support function pointed at another function",
		SQL: `UPDATE pg_catalog.pg_amproc SET amproc = 'pg_catalog.strpos'::pg_catalog.regproc
		      WHERE amprocfamily = (SELECT f.oid FROM pg_catalog.pg_opfamily f WHERE f.opfname = 'text_ops'
		                            AND f.opfmethod = (SELECT a.oid FROM pg_catalog.pg_am a WHERE a.amname = 'btree'))
		        AND amprocnum = 1 AND amproclefttype = 'pg_catalog.text'::pg_catalog.regtype AND amprocrighttype = 'pg_catalog.text'::pg_catalog.regtype`,
		Object: "pg_catalog.text_ops USING btree: FUNCTION 1 (text,text)", Runtime: true},
	// The planner takes a btree family's strategy-3 operator for equality: a text key's lookups
	// by = no longer use an index, and a <> compares as equality through one. readiness's own
	// queries compare text, so verify reports the built-ins alone until they are fixed.
	{Name: "a btree equality operator replaced with <>",
		SQL: `UPDATE pg_catalog.pg_amop SET amopopr = 'pg_catalog.<>(text,text)'::pg_catalog.regoperator
		      WHERE amopfamily = (SELECT f.oid FROM pg_catalog.pg_opfamily f WHERE f.opfname = 'text_ops'
		                          AND f.opfmethod = (SELECT a.oid FROM pg_catalog.pg_am a WHERE a.amname = 'btree'))
		        AND amopstrategy = 3 AND amoplefttype = 'pg_catalog.text'::pg_catalog.regtype AND amoprighttype = 'pg_catalog.text'::pg_catalog.regtype`,
		Object: "pg_catalog.text_ops USING btree: OPERATOR 3 (text,text)", Runtime: true},
	// An implicit bigint-to-integer cast truncates silently where an error was (the *_ms columns).
	{Name: "a built-in cast made implicit",
		SQL: `UPDATE pg_catalog.pg_cast SET castcontext = 'i'
		      WHERE castsource = 'pg_catalog.int8'::pg_catalog.regtype AND casttarget = 'pg_catalog.int4'::pg_catalog.regtype`,
		Object: "(bigint AS integer)", Runtime: true},
	// numeric * integer resolved to *(numeric,numeric); now to this operator. Its fix drops the
	// operator before the function it calls.
	{Name: "an operator and its function created in pg_catalog",
		SQL: `CREATE FUNCTION pg_catalog.qlcc_mul(numeric, integer) RETURNS numeric LANGUAGE sql IMMUTABLE AS $$ SELECT 0::numeric $$;
		      CREATE OPERATOR pg_catalog.* (LEFTARG = numeric, RIGHTARG = integer, FUNCTION = pg_catalog.qlcc_mul)`,
		Object: "operator pg_catalog.*(numeric,integer)", Runtime: true},
	// An operator family created in pg_catalog, where every session looks first.
	{Name: "an operator family created in pg_catalog",
		SQL:    `CREATE OPERATOR FAMILY pg_catalog.qlcc_ops USING btree`,
		Object: "opfamily pg_catalog.qlcc_ops USING btree", Runtime: true},
}
