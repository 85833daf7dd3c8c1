-- The loop bench (qlbench --scenario loop, internal/app/bench/loop.go): admitted → running in
-- database time, completions, and the Runs still live. Bench reads only, as the superuser.

-- name: BenchLoopLatency :one
-- Runs of a project admitted in [from_ms, to_ms): their first Attempt's start (the worker's ACK,
-- dispatching → running) minus the Run's admission (queued_at_ms), both database times.
SELECT count(*)::bigint AS runs,
       count(a.started_at_ms)::bigint AS started,
       count(*) FILTER (WHERE r.state <> 'succeeded')::bigint AS not_succeeded,
       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY a.started_at_ms - r.queued_at_ms), 0)::float8 AS p50_ms,
       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY a.started_at_ms - r.queued_at_ms), 0)::float8 AS p99_ms,
       coalesce(max(a.started_at_ms - r.queued_at_ms), 0)::bigint AS max_ms,
       coalesce(min(a.started_at_ms), 0)::bigint AS first_start_ms,
       coalesce(max(r.finished_at_ms), 0)::bigint AS last_finish_ms
FROM control_core.runs r
JOIN control_core.attempts a ON a.run_id = r.run_id AND a.attempt_no = 1
WHERE r.project_id = @project_id::text AND r.queued_at_ms >= @from_ms::bigint AND r.queued_at_ms < @to_ms::bigint;

-- name: BenchLoopCompletions :one
-- Runs of a project that succeeded in [from_ms, to_ms), database time.
SELECT count(*)::bigint FROM control_core.runs
WHERE project_id = @project_id::text AND state = 'succeeded'
  AND finished_at_ms >= @from_ms::bigint AND finished_at_ms < @to_ms::bigint;

-- name: BenchLoopLive :one
-- Runs of a project not yet terminal.
SELECT count(*)::bigint FROM control_core.runs
WHERE project_id = @project_id::text AND state IN ('queued', 'dispatching', 'running');

-- name: BenchLoopSessions :one
-- Active worker sessions.
SELECT count(*)::bigint FROM control_core.worker_sessions WHERE state = 'active';
