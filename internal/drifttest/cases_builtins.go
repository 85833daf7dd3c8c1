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
}
