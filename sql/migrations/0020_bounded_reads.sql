-- pg-0020-bounded-reads: indexes that keep the operator reads, the replica's startup recovery and
-- the metrics scrape bounded as history grows (100,000 triggers, millions of Runs).
-- control-core capability v19 / bounded_reads.

-- +goose Up

-- ---- operator reads (status, runs list, trigger list, task list, console overview)
-- runs list --state: a project's Runs in one state, newest first, as one backward range (across
-- projects: one range per project, merged). Without it a state that matches nothing walked the
-- project's whole history through runs_project_created_idx. It costs every admit one more B-tree
-- insert into runs (and every state change one, which is never HOT anyway: runs_recovery_idx's
-- predicate names state).
CREATE INDEX runs_project_state_created_idx ON control_core.runs (project_id, state, created_at_ms, run_id);

-- ---- startup recovery source

SELECT control_core.advance_capability('control-core', 19, 'bounded_reads', 'pg-0020-bounded-reads');
