package drifttest

// recovery: the startup recovery source's indexes and the trigger that keeps a live Run's
// Attempt (pg-0020, issue 37). A narrower or missing index hides candidates from recovery (or
// walks every queued Run again); a disabled trigger lets a live Run lose its Attempt, the one
// shape neither index finds.
var recovery = []Case{
	{Name: "the recovery source's runs index dropped",
		SQL: `DROP INDEX control_core.runs_recovery_drift_idx`, Object: "runs_recovery_drift_idx", Runtime: true},
	{Name: "the recovery source's attempts index narrowed",
		SQL: `DROP INDEX control_core.attempts_recovery_drift_idx;
		      CREATE INDEX attempts_recovery_drift_idx ON control_core.attempts (run_id) WHERE state <> 'claimed'`,
		Object: "attempts_recovery_drift_idx", Runtime: true},
	{Name: "the recovery source's attempts index marked invalid",
		SQL:    `UPDATE pg_catalog.pg_index SET indisvalid = false WHERE indexrelid = 'control_core.attempts_recovery_drift_idx'::regclass`,
		Object: "attempts_recovery_drift_idx", Runtime: true},
	{Name: "the trigger keeping a live Run's Attempt disabled",
		SQL:    `ALTER TABLE control_core.attempts DISABLE TRIGGER attempts_keep_live_run_attempt`,
		Object: "attempts_keep_live_run_attempt", Runtime: true},
	{Name: "the truncate guard of a live Run's Attempt dropped",
		SQL:    `DROP TRIGGER attempts_keep_live_run_attempt_truncate ON control_core.attempts`,
		Object: "attempts_keep_live_run_attempt_truncate", Runtime: true},
	{Name: "the function keeping a live Run's Attempt replaced",
		SQL: `CREATE OR REPLACE FUNCTION control_core.attempts_keep_live_run_attempt() RETURNS trigger
		      LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog AS $$ BEGIN RETURN coalesce(NEW, OLD); END $$`,
		Object: "control_core.attempts_keep_live_run_attempt()", Runtime: true},
	{Name: "the trigger keeping a Run from going live without an Attempt disabled",
		SQL:    `ALTER TABLE control_core.runs DISABLE TRIGGER runs_keep_live_attempt`,
		Object: "runs_keep_live_attempt", Runtime: true},
}
