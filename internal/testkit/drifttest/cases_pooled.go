package drifttest

// pooled: what pg-0027 holds for the hot path behind a transaction pooler: the claim and the
// admit as PL/pgSQL functions the runtime role calls (SECURITY INVOKER, so the caller's own table
// privileges apply). A body replaced would let a pooled runtime claim or admit by other rules
// than a direct one (here: an admit that skips the fence); a definer would run the admit with
// the owner's privileges. pg-0029 gives both the store's planner settings as their own: without
// them a server session's first caller decides the plan every later call keeps (a claim that
// sorts the whole due range; an admit planned with every join order searched).
var pooled = []Case{
	{Name: "the pooled admit replaced by one that writes nothing",
		SQL: `CREATE OR REPLACE FUNCTION control_core.admit(text[], text[], text[], text[], uuid[], bigint[], bigint[], bigint[],
		                                                    bigint[], bigint[], bigint[], bigint[], bigint[], text[], text[],
		                                                    text[], uuid[], text[], text[], bigint[], uuid[], bigint[], bigint[])
		      RETURNS TABLE (ord integer, run_id uuid, attempt_id uuid, admitted_at_ms bigint)
		      LANGUAGE plpgsql VOLATILE SECURITY INVOKER SET search_path = pg_catalog
		      AS $$ BEGIN RETURN; END $$`,
		Object: "control_core.admit(text[], text[], text[], text[], uuid[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], text[], text[], text[], uuid[], text[], text[], bigint[], uuid[], bigint[], bigint[])", Runtime: true},
	{Name: "the pooled claim made SECURITY DEFINER",
		SQL:    `ALTER FUNCTION control_core.claim_due(text, bigint, bigint, integer) SECURITY DEFINER`,
		Object: "control_core.claim_due(text, bigint, bigint, integer)", Runtime: true},
	{Name: "the pooled claim's own enable_sort off reset",
		SQL:    `ALTER FUNCTION control_core.claim_due(text, bigint, bigint, integer) RESET enable_sort`,
		Object: "control_core.claim_due(text, bigint, bigint, integer)", Runtime: true},
	{Name: "the pooled admit's own join_collapse_limit changed",
		SQL: `ALTER FUNCTION control_core.admit(text[], text[], text[], text[], uuid[], bigint[], bigint[], bigint[],
		                                        bigint[], bigint[], bigint[], bigint[], bigint[], text[], text[],
		                                        text[], uuid[], text[], text[], bigint[], uuid[], bigint[], bigint[])
		      SET join_collapse_limit = 8`,
		Object: "control_core.admit(text[], text[], text[], text[], uuid[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], text[], text[], text[], uuid[], text[], text[], bigint[], uuid[], bigint[], bigint[])", Runtime: true},
	{Name: "EXECUTE on the pooled claim for the admin role",
		SQL:    `GRANT EXECUTE ON FUNCTION control_core.claim_due(text, bigint, bigint, integer) TO {admin}`,
		Object: "control_core.claim_due(text, bigint, bigint, integer)", Runtime: true},
}
