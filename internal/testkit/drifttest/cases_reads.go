package drifttest

// reads: the index pg-0020 adds for the operator reads (issue 37, point 2). Without it, or with
// another definition, `runs list --state` walks a project's whole history again; an altered
// definition can also change what an admit writes (a unique or a partial index), so each is
// drift that verify names and --fix-sql rebuilds.
var reads = []Case{
	{Name: "the runs-by-state index dropped",
		SQL: `DROP INDEX control_core.runs_project_state_created_idx`, Object: "runs_project_state_created_idx", Runtime: true},
	{Name: "the runs-by-state index rebuilt on other columns",
		SQL: `DROP INDEX control_core.runs_project_state_created_idx;
		      CREATE INDEX runs_project_state_created_idx ON control_core.runs (project_id, created_at_ms, run_id)`,
		Object: "runs_project_state_created_idx", Runtime: true},
	{Name: "the runs-by-state index made partial",
		SQL: `DROP INDEX control_core.runs_project_state_created_idx;
		      CREATE INDEX runs_project_state_created_idx ON control_core.runs (project_id, state, created_at_ms, run_id)
		          WHERE state = 'failed'`,
		Object: "runs_project_state_created_idx", Runtime: true},
	{Name: "the runs-by-state index made unique",
		SQL: `DROP INDEX control_core.runs_project_state_created_idx;
		      CREATE UNIQUE INDEX runs_project_state_created_idx ON control_core.runs (project_id, state, created_at_ms, run_id)`,
		Object: "runs_project_state_created_idx", Runtime: true},
	{Name: "the runs-by-state index marked invalid",
		SQL:    `UPDATE pg_catalog.pg_index SET indisvalid = false WHERE indexrelid = 'control_core.runs_project_state_created_idx'::regclass`,
		Object: "runs_project_state_created_idx", Runtime: true},
}
