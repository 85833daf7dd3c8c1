package drifttest

// dispatch: what the closed loop (pg-0022, pg-0023, pg-0028, issue 32) holds as database facts: one active lease per
// Run and one live offer per Attempt (unique partial indexes), the placement queue's index, the
// token guard, the Run/Attempt agreement at commit (I1), the rule functions the dispatcher and
// recovery share, and the grants on worker tokens and cancel_run. Each change would let a
// dispatcher run a Run twice, place from history, accept a forged or un-revocable token, or let
// recovery and the dispatcher disagree about whose a Run is.
var dispatch = []Case{
	{Name: "the one-active-lease-per-Run index dropped",
		SQL: `DROP INDEX control_core.run_leases_live_run_idx`, Object: "run_leases_live_run_idx", Runtime: true},
	{Name: "the one-live-offer-per-Attempt index made non-unique",
		SQL: `DROP INDEX control_core.dispatch_offers_live_attempt_idx;
		      CREATE INDEX dispatch_offers_live_attempt_idx ON control_core.dispatch_offers (attempt_id) WHERE state = 'offered'`,
		Object: "dispatch_offers_live_attempt_idx", Runtime: true},
	{Name: "the placement queue index dropped",
		SQL: `DROP INDEX control_core.runs_dispatch_queue_idx`, Object: "runs_dispatch_queue_idx", Runtime: true},
	{Name: "the worker token guard disabled",
		SQL:    `ALTER TABLE control_core.worker_tokens DISABLE TRIGGER worker_tokens_guard`,
		Object: "worker_tokens_guard", Runtime: true},
	{Name: "the Run and Attempt agreement trigger disabled",
		SQL:    `ALTER TABLE control_core.runs DISABLE TRIGGER run_attempt_agree`,
		Object: "run_attempt_agree", Runtime: true},
	{Name: "the live Attempt shape replaced",
		SQL: `CREATE OR REPLACE FUNCTION control_core.attempt_live_shape(state text, worker_id text, worker_session_id uuid,
		          offer_id uuid, run_lease_id uuid, callback_token_hash text, started_at_ms bigint, finished_at_ms bigint,
		          result jsonb, error jsonb) RETURNS boolean
		      LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT true $$`,
		Object: "control_core.attempt_live_shape(text, text, uuid, uuid, uuid, text, bigint, bigint, jsonb, jsonb)", Runtime: true},
	{Name: "the Run and Attempt state agreement replaced",
		SQL: `CREATE OR REPLACE FUNCTION control_core.run_attempt_states_agree(run_state text, attempt_state text) RETURNS boolean
		      LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT true $$`,
		Object: "control_core.run_attempt_states_agree(text, text)", Runtime: true},
	{Name: "the 7-argument task digest replaced",
		SQL: `CREATE OR REPLACE FUNCTION control_core.task_digest(task_id text, revision bigint, execution_revision_id uuid,
		          execution_digest text, max_attempts integer, retry_backoff_ms bigint, worker_selector jsonb) RETURNS text
		      LANGUAGE sql STABLE PARALLEL SAFE
		      AS $$ SELECT control_core.task_digest(task_id, revision, execution_revision_id, execution_digest) $$`,
		Object: "control_core.task_digest(text, bigint, uuid, text, integer, bigint, jsonb)", Runtime: true},
	{Name: "INSERT on worker tokens for the runtime role",
		SQL: `GRANT INSERT ON control_core.worker_tokens TO {runtime}`, Object: "control_core.worker_tokens", Runtime: true},
	{Name: "DELETE on worker tokens for the runtime role",
		SQL: `GRANT DELETE ON control_core.worker_tokens TO {runtime}`, Object: "control_core.worker_tokens", Runtime: true},
	{Name: "SELECT on worker tokens for the worker ingress role",
		SQL: `GRANT SELECT ON control_core.worker_tokens TO {worker}`, Object: "control_core.worker_tokens", Runtime: true},
	// pg-0023: I1 on an Attempt's insert, a lease's Run tied to its Attempt's, the hand-back cap
	{Name: "the Run and Attempt agreement on attempts narrowed back to state updates",
		SQL: `DROP TRIGGER run_attempt_agree ON control_core.attempts;
		      CREATE CONSTRAINT TRIGGER run_attempt_agree AFTER UPDATE OF state ON control_core.attempts
		          DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION control_core.run_attempt_agree()`,
		Object: "run_attempt_agree", Runtime: true},
	{Name: "the lease's Run no longer tied to its Attempt's Run",
		SQL:    `ALTER TABLE control_core.run_leases DROP CONSTRAINT run_leases_attempt_run_fkey`,
		Object: "run_leases_attempt_run_fkey", Runtime: true},
	{Name: "the hand-back cap replaced",
		SQL: `CREATE OR REPLACE FUNCTION control_core.max_hand_backs() RETURNS integer
		      LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 1000000 $$`,
		Object: "control_core.max_hand_backs()", Runtime: true},
	// pg-0025: the definition lifecycle's functions stay the admin's, and archived stays archived
	{Name: "EXECUTE on prune_runs granted to the runtime role",
		SQL:    `GRANT EXECUTE ON FUNCTION control_core.prune_runs(text, bigint, integer, boolean) TO {runtime}`,
		Object: "control_core.prune_runs(text, bigint, integer, boolean)", Runtime: true},
	{Name: "EXECUTE on run_now granted to the runtime role",
		SQL:    `GRANT EXECUTE ON FUNCTION control_core.run_now(text, text, uuid, text) TO {runtime}`,
		Object: "control_core.run_now(text, text, uuid, text)", Runtime: true},
	{Name: "the archived trigger guard dropped from schedule rows",
		SQL:    `DROP TRIGGER archived_trigger_guard ON control_core.trigger_schedules`,
		Object: "archived_trigger_guard", Runtime: true},
	{Name: "DELETE on archived triggers for the admin role",
		SQL:    `GRANT DELETE ON control_core.archived_triggers TO {admin}`,
		Object: "control_core.archived_triggers", Runtime: false},
	// pg-0028: the contract step of pg-0023's expand: the 5-argument retry_at_ms, which counts a
	// hand-back as an attempt, is gone; brought back and granted, a query could retry by the old rule
	{Name: "the contracted 5-argument retry_at_ms recreated for the runtime role",
		SQL: `CREATE FUNCTION control_core.retry_at_ms(outcome text, attempt_no integer, max_attempts integer,
		                                         backoff_ms bigint, now_ms bigint) RETURNS bigint
		      LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog AS $$ SELECT now_ms $$;
		      ALTER FUNCTION control_core.retry_at_ms(text, integer, integer, bigint, bigint) OWNER TO {owner};
		      GRANT EXECUTE ON FUNCTION control_core.retry_at_ms(text, integer, integer, bigint, bigint) TO {runtime}`,
		Object: "control_core.retry_at_ms(text, integer, integer, bigint, bigint)", Runtime: true},
	{Name: "EXECUTE on cancel_run revoked from the admin role (not the runtime's)",
		SQL:    `REVOKE EXECUTE ON FUNCTION control_core.cancel_run(uuid, text) FROM {admin}`,
		Object: "control_core.cancel_run(uuid, text)", Runtime: false},
}
