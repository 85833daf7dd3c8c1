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

-- name: BenchLoopPhases :one
-- Where admitted → finished goes, medians and p99s over a project's Runs admitted in
-- [from_ms, to_ms) with one Attempt: placement (admitted → offered, the run.dispatching event),
-- the worker's acknowledgement (offered → running) and the Attempt (running → the Run finished:
-- the job's process and the report).
WITH p AS (
    SELECT (SELECT e.at_ms FROM control_core.run_events e WHERE e.run_id = r.run_id AND e.type = 'run.dispatching' ORDER BY e.seq LIMIT 1) - r.queued_at_ms AS placed,
           a.started_at_ms - (SELECT e.at_ms FROM control_core.run_events e WHERE e.run_id = r.run_id AND e.type = 'run.dispatching' ORDER BY e.seq LIMIT 1) AS acked,
           r.finished_at_ms - a.started_at_ms AS ran
    FROM control_core.runs r
    JOIN control_core.attempts a ON a.run_id = r.run_id AND a.attempt_no = 1
    WHERE r.project_id = @project_id::text AND r.queued_at_ms >= @from_ms::bigint AND r.queued_at_ms < @to_ms::bigint
      AND r.state = 'succeeded')
SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY placed), 0)::float8 AS placed_p50_ms,
       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY placed), 0)::float8 AS placed_p99_ms,
       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY acked), 0)::float8 AS acked_p50_ms,
       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY acked), 0)::float8 AS acked_p99_ms,
       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY ran), 0)::float8 AS ran_p50_ms,
       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY ran), 0)::float8 AS ran_p99_ms
FROM p;

-- name: BenchLoopRunTimes :many
-- The database times of each Run of a project admitted in [from_ms, to_ms) whose first Attempt
-- started: admitted (queued_at_ms, the admit's statement time), offered (its first offer's
-- offered_at_ms, the offer's statement time) and running (the Attempt's started_at_ms, the ACK's
-- statement time). The loop bench joins them with the dispatchers' Debug lines (segments).
SELECT r.run_id, r.queued_at_ms::bigint AS queued_at_ms, o.offered_at_ms, a.started_at_ms::bigint AS started_at_ms
FROM control_core.runs r
JOIN control_core.attempts a ON a.run_id = r.run_id AND a.attempt_no = 1
JOIN LATERAL (SELECT d.offered_at_ms FROM control_core.dispatch_offers d WHERE d.attempt_id = a.attempt_id
              ORDER BY d.offered_at_ms LIMIT 1) o ON true
WHERE r.project_id = @project_id::text AND r.queued_at_ms >= @from_ms::bigint AND r.queued_at_ms < @to_ms::bigint
  AND a.started_at_ms IS NOT NULL
ORDER BY r.queued_at_ms;
