-- The read-only web console (`qlsched ui`, internal/app/console): read by package admin's Reader in
-- one REPEATABLE READ READ ONLY snapshot per page, as any role with SELECT on control_core.
-- Every statement is bounded by an index and a cap or a page size, so a page costs the same at
-- 1,000,000 schedule rows and 10,000,000 Runs as at ten (docs/console.md). Nothing here returns
-- an executor spec (it may hold secrets), a claim token or a callback token hash.

-- name: ConsoleNoJIT :exec
-- No JIT for the rest of the console's transaction. The statements are small walks of an index,
-- but a LATERAL per project multiplies the planner's estimates past the JIT thresholds, and the
-- compilation then cost ~1 s of a 2 ms overview (EXPLAIN ANALYZE, BenchmarkPages); the
-- coordinator's hot statements turn it off for the same reason (coordinator.HotSettings).
SELECT set_config('jit', 'off', true);

-- name: ConsoleAdmissions :many
-- The scheduler's admissions of the last @window_ms per project, read once from a range of
-- runs_project_created_idx: one row per minute (minute 0 is the oldest) with its count and the
-- admission lag's p50 and p99, and one row for the whole window (minute -1). Percentiles of
-- minutes do not combine, so the grouping sets compute both from the same rows: two statements
-- read the last hour's Runs twice (about 40,000 at 10M Runs, 0.7 s cold).
SELECT p.project_id, coalesce(a.minute, -1)::bigint AS minute, a.admissions::bigint AS admissions,
       coalesce(a.lag[1], 0)::bigint AS lag_p50_ms, coalesce(a.lag[2], 0)::bigint AS lag_p99_ms
FROM control_core.projects p
CROSS JOIN LATERAL (
    -- both percentiles from one sort of each group's lags (an array of fractions)
    SELECT ((r.created_at_ms - (control_core.db_now_ms() - @window_ms::bigint)) / 60000) AS minute,
           count(*) AS admissions,
           percentile_disc(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY r.queued_at_ms - r.scheduled_for_ms) AS lag
    FROM control_core.runs r
    WHERE r.project_id = p.project_id
      AND r.created_at_ms >= control_core.db_now_ms() - @window_ms::bigint
      AND r.owner = 'runtime' AND r.scheduled_for_ms IS NOT NULL AND r.queued_at_ms IS NOT NULL
    GROUP BY GROUPING SETS ((minute), ())
) a
ORDER BY p.project_id, minute;

-- name: ConsoleProjectTriggers :many
-- One page of a project's triggers by id, after @after_trigger ('' for the first page), each with
-- its head revision, schedule row and newest Run (one backward probe of runs_occurrence_key).
SELECT s.project_id, s.trigger_id, s.trigger_revision, tr.cron_spec, tr.timezone, tr.misfire_policy, tr.misfire_grace_ms, tr.enabled,
       tr.task_id, tr.task_revision, tr.content_digest, tr.created_at_ms AS revision_created_at_ms,
       p.state AS project_state, s.next_fire_at_ms, s.last_scheduled_at_ms, s.state_version,
       s.claim_owner, s.claim_version, s.claim_expires_at_ms, s.updated_at_ms,
       coalesce(lr.run_id, '00000000-0000-0000-0000-000000000000'::uuid) AS last_run_id, coalesce(lr.state, '') AS last_run_state, -- nil, '': no Run yet
       lr.scheduled_for_ms AS last_run_scheduled_for_ms,
       lr.queued_at_ms AS last_run_queued_at_ms,
       control_core.db_now_ms()::bigint AS now_ms
FROM control_core.trigger_schedules s
JOIN control_core.trigger_revisions tr
  ON tr.project_id = s.project_id AND tr.trigger_id = s.trigger_id AND tr.revision = s.trigger_revision
JOIN control_core.projects p ON p.project_id = s.project_id
LEFT JOIN LATERAL (
    SELECT x.run_id, x.state, x.scheduled_for_ms, x.queued_at_ms
    FROM control_core.runs x
    WHERE x.project_id = s.project_id AND x.trigger_id = s.trigger_id
    ORDER BY x.scheduled_for_ms DESC
    LIMIT 1
) lr ON true
WHERE s.project_id = @project_id::text AND s.trigger_id > @after_trigger::text
  -- the same bounds on the revisions (implied by the join): otherwise the planner merge-joins
  -- from the project's first revision and walks every one before the page
  AND tr.project_id = @project_id::text AND tr.trigger_id > @after_trigger::text
ORDER BY s.trigger_id
LIMIT @max_rows::integer;

-- name: ConsoleTriggerRevisions :many
-- A trigger's revisions, newest first, at most @max_rows (its primary key, backwards).
SELECT tr.revision, tr.kind, tr.cron_spec, tr.timezone, tr.misfire_policy, tr.misfire_grace_ms, tr.enabled, tr.task_id,
       tr.task_revision, tr.content_digest, tr.created_at_ms
FROM control_core.trigger_revisions tr
WHERE tr.project_id = @project_id::text AND tr.trigger_id = @trigger_id::text
ORDER BY tr.revision DESC
LIMIT @max_rows::integer;

-- name: ConsoleRunsPage :many
-- One page of a project's Runs, newest first, strictly before the keyset (@before_created_ms,
-- @before_run_id) and created at or after @since_ms: a backward range of
-- runs_project_created_idx. The state is a filter on that walk.
SELECT r.run_id, r.project_id, r.task_id, r.task_revision, r.trigger_id, r.trigger_revision, r.scheduled_for_ms,
       r.idempotency_key, r.state, r.queued_at_ms, r.created_at_ms,
       (SELECT count(*) FROM control_core.attempts a WHERE a.run_id = r.run_id)::bigint AS attempts,
       (SELECT count(*) FROM control_core.run_events e WHERE e.run_id = r.run_id)::bigint AS events
FROM control_core.runs r
WHERE r.project_id = @project_id::text
  AND (r.created_at_ms, r.run_id) < (@before_created_ms::bigint, @before_run_id::uuid)
  AND r.created_at_ms >= @since_ms::bigint
  AND (sqlc.narg(state)::text IS NULL OR r.state = sqlc.narg(state)::text)
ORDER BY r.created_at_ms DESC, r.run_id DESC
LIMIT @max_rows::integer;

-- name: ConsoleTriggerRunsPage :many
-- One page of one trigger's Runs, newest occurrence first, strictly before @before_scheduled_ms
-- and scheduled at or after @since_ms: a backward range of runs_occurrence_key.
SELECT r.run_id, r.project_id, r.task_id, r.task_revision, r.trigger_id, r.trigger_revision, r.scheduled_for_ms,
       r.idempotency_key, r.state, r.queued_at_ms, r.created_at_ms,
       (SELECT count(*) FROM control_core.attempts a WHERE a.run_id = r.run_id)::bigint AS attempts,
       (SELECT count(*) FROM control_core.run_events e WHERE e.run_id = r.run_id)::bigint AS events
FROM control_core.runs r
WHERE r.project_id = @project_id::text AND r.trigger_id = @trigger_id::text
  AND r.scheduled_for_ms < @before_scheduled_ms::bigint
  AND r.scheduled_for_ms >= @since_ms::bigint
  AND (sqlc.narg(state)::text IS NULL OR r.state = sqlc.narg(state)::text)
ORDER BY r.scheduled_for_ms DESC
LIMIT @max_rows::integer;

-- name: ConsoleProject :many
-- One project's head (none when it does not exist).
SELECT p.project_id, p.state, p.revision, p.created_at_ms, p.updated_at_ms
FROM control_core.projects p
WHERE p.project_id = @project_id::text;
