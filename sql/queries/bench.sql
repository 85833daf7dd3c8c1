-- Queries of `qlbench` only.

-- name: BenchSetDue :execrows
-- Put every schedule row of a project at the occurrence due_ms (on time, not missed), unclaimed: a
-- backlog of due rows. Also ends the claims the ceiling phase was holding when its time ran out
-- (its workers have stopped), so the replicas do not wait out their leases. Run as the runtime
-- role, which may UPDATE schedules.
UPDATE control_core.trigger_schedules
SET next_fire_at_ms = @due_ms::bigint, state_version = state_version + 1,
    claim_owner = NULL, claim_token = NULL, claim_expires_at_ms = NULL,
    updated_at_ms = greatest(updated_at_ms, control_core.db_now_ms())
WHERE project_id = @project_id::text;

-- name: CeilingAdmit :execrows
-- The ceiling's write set: the admit's inserts and cursor advances for the claimed rows (one or a
-- batch, as parallel arrays like Admit's) in one READ COMMITTED statement, with no fence, no
-- revision or digest checks and no SERIALIZABLE: the database's own rate for the rows an
-- admission writes, under the key format the runs table checks. The table holds one Run per
-- occurrence, and the phases write occurrences the replicas (and the other phases) write too, so
-- each phase shifts its Runs' scheduled time by occurrence_offset_ms, into a range no schedule
-- reaches (see bench.go): the same rows, constraints and index entries, never a collision. Run
-- identities come from the caller, made as the replicas make theirs (coordinator.RunIDs, one
-- source per batch), so they land in the runs primary key as the replicas' do.
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms),
item AS (
    SELECT i.*
    FROM ROWS FROM (unnest(@project_ids::text[]), unnest(@trigger_ids::text[]), unnest(@task_ids::text[]),
                    unnest(@task_revisions::bigint[]), unnest(@execution_revision_ids::uuid[]),
                    unnest(@trigger_revisions::bigint[]), unnest(@scheduled_for_ms::bigint[]),
                    unnest(@next_fire_at_ms::bigint[]), unnest(@run_ids::uuid[]))
         AS i (project_id, trigger_id, task_id, task_revision, execution_revision_id, trigger_revision,
               scheduled_for_ms, next_fire_at_ms, run_id)
),
run AS (
    INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id, trigger_id,
                                   trigger_revision, scheduled_for_ms, idempotency_key, state, owner,
                                   queued_at_ms, created_at_ms, updated_at_ms)
    SELECT i.run_id, i.project_id, i.task_id, i.task_revision, i.execution_revision_id, i.trigger_id,
           i.trigger_revision, i.scheduled_for_ms + @occurrence_offset_ms::bigint,
           control_core.cron_idempotency_key(i.trigger_id, i.trigger_revision, i.scheduled_for_ms + @occurrence_offset_ms::bigint),
           'queued', 'runtime', obs.now_ms, obs.now_ms, obs.now_ms
    FROM item i CROSS JOIN obs
),
attempt AS (
    INSERT INTO control_core.attempts (attempt_id, run_id, attempt_no, executor_kind, state, created_at_ms, updated_at_ms)
    SELECT gen_random_uuid(), i.run_id, 1, 'remote_worker', 'claimed', obs.now_ms, obs.now_ms
    FROM item i CROSS JOIN obs
),
events AS (
    INSERT INTO control_core.run_events (event_id, run_id, seq, type, at_ms)
    SELECT gen_random_uuid(), i.run_id, e.seq, e.type, obs.now_ms
    FROM item i CROSS JOIN obs CROSS JOIN (VALUES (1, 'run.created'), (2, 'run.queued')) AS e (seq, type)
)
UPDATE control_core.trigger_schedules s
SET next_fire_at_ms = i.next_fire_at_ms, last_scheduled_at_ms = i.scheduled_for_ms,
    state_version = s.state_version + 1, claim_owner = NULL, claim_token = NULL, claim_expires_at_ms = NULL,
    updated_at_ms = greatest(s.updated_at_ms, obs.now_ms)
FROM item i CROSS JOIN obs
WHERE s.project_id = i.project_id AND s.trigger_id = i.trigger_id;

-- name: BenchLag :one
-- Admission lag percentiles of a project's real admissions (not the ceiling's, which are
-- scheduled at ceiling_from_ms or later) since since_ms.
SELECT count(*)::bigint AS runs,
       count(DISTINCT trigger_id)::bigint AS triggers, -- triggers with at least one of them
       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY queued_at_ms - scheduled_for_ms), 0)::float8 AS p50_ms,
       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY queued_at_ms - scheduled_for_ms), 0)::float8 AS p99_ms,
       coalesce(max(queued_at_ms) - min(queued_at_ms), 0)::bigint AS span_ms
FROM control_core.runs
WHERE project_id = @project_id::text AND scheduled_for_ms < @ceiling_from_ms::bigint AND queued_at_ms >= @since_ms::bigint;

-- name: BenchDuplicates :one
SELECT count(*)::bigint FROM (
    SELECT 1 FROM control_core.runs WHERE project_id = @project_id::text AND scheduled_for_ms < @ceiling_from_ms::bigint
    GROUP BY trigger_id, trigger_revision, scheduled_for_ms HAVING count(*) > 1) d;

-- name: BenchBursts :many
-- Per scheduled instant from from_ms on (the burst scenario: every trigger of the project shares
-- each instant), the real admissions' count and lag (admit database time minus the instant):
-- p50, p99, and the largest, which is the time the burst took to drain.
SELECT scheduled_for_ms::bigint AS scheduled_for_ms, count(*)::bigint AS runs,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY queued_at_ms - scheduled_for_ms)::float8 AS p50_ms,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY queued_at_ms - scheduled_for_ms)::float8 AS p99_ms,
       max(queued_at_ms - scheduled_for_ms)::bigint AS max_ms
FROM control_core.runs
WHERE project_id = @project_id::text AND scheduled_for_ms >= @from_ms::bigint AND scheduled_for_ms < @ceiling_from_ms::bigint
GROUP BY scheduled_for_ms
ORDER BY scheduled_for_ms;

-- name: BenchRunsAt :one
-- How many Runs of a project are scheduled at one instant: a burst is drained when it is every trigger.
SELECT count(*)::bigint FROM control_core.runs
WHERE project_id = @project_id::text AND scheduled_for_ms = @scheduled_for_ms::bigint;

-- name: BenchUninitialised :one
-- Schedule rows of these projects no replica has initialised yet (no cursor).
SELECT count(*)::bigint FROM control_core.trigger_schedules
WHERE project_id = ANY (@project_ids::text[]) AND next_fire_at_ms IS NULL;

-- name: BenchWindow :one
-- A project's Runs scheduled in (from_ms, to_ms]: how many, and the largest admission lag.
SELECT count(*)::bigint AS runs, coalesce(max(queued_at_ms - scheduled_for_ms), 0)::bigint AS max_lag_ms
FROM control_core.runs
WHERE project_id = @project_id::text AND scheduled_for_ms > @from_ms::bigint AND scheduled_for_ms <= @to_ms::bigint;
