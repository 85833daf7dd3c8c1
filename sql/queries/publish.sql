-- Publisher queries: run by the admin role, each command in one transaction. Content digests are
-- sha256 (hex) over the jsonb text rendering of a revision's content, by the digest functions of
-- the migrations (control_core.project_digest …): computed here and recomputed by the admit (see
-- scheduler.sql) with the same function, so a digest that no longer matches its row is caught.

-- name: LockProject :one
-- The audited Project lock of pg-0018: serialises publishes per project and leaves an audit row.
SELECT control_core.lock_project(@project_id::text, @reason::text)::bigint AS revision;

-- name: CreateProject :one
INSERT INTO control_core.projects (project_id, state, revision, content_digest)
VALUES (@project_id::text, 'active', 1,
        control_core.project_digest(@project_id::text, 'active', 1))
ON CONFLICT (project_id) DO NOTHING
RETURNING project_id, revision, content_digest, created_at_ms;

-- name: GetProject :one
SELECT project_id, state, revision, content_digest FROM control_core.projects WHERE project_id = $1;

-- name: SetProjectState :one
-- Pause or resume a project, under its lock: the new state at the next revision, with the digest
-- of that content. The admit re-checks state, revision and digest, so a claim taken before the
-- change admits nothing, even once the project is active again. Schedule rows are not touched.
UPDATE control_core.projects
SET state          = @state::text,
    revision       = revision + 1,
    content_digest = control_core.project_digest(project_id, @state::text, revision + 1),
    updated_at_ms  = greatest(updated_at_ms, control_core.db_now_ms())
WHERE project_id = @project_id::text
RETURNING project_id, state, revision, content_digest;

-- name: LockProjectForStateChange :exec
-- A pause or resume takes its project's row FOR UPDATE as well as the audited lock (lock_project,
-- FOR NO KEY UPDATE since pg-0026), so it cannot return while an admit that read the former state
-- may still commit: an admit's Run takes FOR KEY SHARE of the project row (its foreign key), which
-- FOR UPDATE conflicts with and NO KEY UPDATE does not. An admit holding that lock is waited for;
-- one that reaches it after the change committed fails its SERIALIZABLE transaction (40001) and
-- runs again against the new state. No cycle: a state change touches no schedule row (an admit
-- locks those first).
SELECT 1 FROM control_core.projects WHERE project_id = @project_id::text FOR UPDATE;

-- name: SetAuditReason :exec
-- The reason the audit rows written by the rest of this transaction carry (pg-0019: the database
-- writes them, by triggers; detail "by" of project.create, "change" of trigger.publish).
SELECT set_config('control_core.audit_reason', @reason::text, true);

-- name: UpsertExecutionRevision :one
-- Execution revisions are immutable and content-addressed per project: publishing the same spec
-- again reuses the row.
WITH ins AS (
    INSERT INTO control_core.execution_revisions (execution_revision_id, project_id, executor_kind, spec, digest)
    VALUES (gen_random_uuid(), @project_id::text, 'remote_worker', @spec::jsonb,
            control_core.execution_digest(@spec::jsonb))
    ON CONFLICT (project_id, digest) DO NOTHING
    RETURNING execution_revision_id, digest
)
SELECT execution_revision_id, digest FROM ins
UNION ALL
SELECT e.execution_revision_id, e.digest FROM control_core.execution_revisions e
WHERE e.project_id = @project_id::text AND e.digest = control_core.execution_digest(@spec::jsonb)
LIMIT 1;

-- name: BumpTaskHead :one
INSERT INTO control_core.tasks (project_id, task_id, head_revision)
VALUES (@project_id::text, @task_id::text, 1)
ON CONFLICT (project_id, task_id) DO UPDATE
    SET head_revision = control_core.tasks.head_revision + 1,
        updated_at_ms = greatest(control_core.tasks.updated_at_ms, control_core.db_now_ms())
RETURNING head_revision;

-- name: InsertTaskRevision :one
-- The retry policy and worker selector (pg-0022) are part of the revision and of its digest: the
-- 7-argument task_digest, which equals the 4-argument one for the defaults (1, 0, '{}'), so a
-- task without a policy keeps the digest it always had.
INSERT INTO control_core.task_revisions (project_id, task_id, revision, execution_revision_id,
                                         max_attempts, retry_backoff_ms, worker_selector, content_digest)
SELECT @project_id::text, @task_id::text, @revision::bigint, e.execution_revision_id,
       @max_attempts::integer, @retry_backoff_ms::bigint, @worker_selector::jsonb,
       control_core.task_digest(@task_id::text, @revision::bigint, e.execution_revision_id, e.digest,
                                @max_attempts::integer, @retry_backoff_ms::bigint, @worker_selector::jsonb)
FROM control_core.execution_revisions e
WHERE e.execution_revision_id = @execution_revision_id::uuid
RETURNING revision, content_digest;

-- name: GetTaskHead :one
SELECT head_revision FROM control_core.tasks WHERE project_id = $1 AND task_id = $2 FOR SHARE;

-- name: BumpTriggerHead :one
INSERT INTO control_core.triggers (project_id, trigger_id, head_revision)
VALUES (@project_id::text, @trigger_id::text, 1)
ON CONFLICT (project_id, trigger_id) DO UPDATE
    SET head_revision = control_core.triggers.head_revision + 1,
        updated_at_ms = greatest(control_core.triggers.updated_at_ms, control_core.db_now_ms())
RETURNING head_revision;

-- name: InsertTriggerRevision :one
INSERT INTO control_core.trigger_revisions (project_id, trigger_id, revision, kind, cron_spec, timezone,
                                            misfire_policy, misfire_grace_ms, enabled, task_id, task_revision,
                                            content_digest)
VALUES (@project_id::text, @trigger_id::text, @revision::bigint, 'cron', @cron_spec::text, @timezone::text,
        @misfire_policy::text, @misfire_grace_ms::bigint, @enabled::boolean, @task_id::text, @task_revision::bigint,
        control_core.trigger_digest('cron', @cron_spec::text, @timezone::text, @misfire_policy::text,
                                    @misfire_grace_ms::bigint, @enabled::boolean, @task_id::text, @task_revision::bigint))
RETURNING revision, content_digest;

-- name: ResetSchedule :one
-- One schedule row per trigger head: after a new revision, reset_schedule (pg-0019; the admin role
-- holds no INSERT or UPDATE on the table) moves the row to the head, clears the cursor and the
-- claim and increments state_version and claim_version, so every claim taken under an older
-- revision fails its fence.
SELECT s.state_version::bigint AS state_version, s.claim_version::bigint AS claim_version
FROM control_core.reset_schedule(@project_id::text, @trigger_id::text) s;

-- name: GetTriggerHeads :many
-- The head revisions of a project's triggers (of those trigger_ids names when it is not NULL),
-- with their schedule rows' versions: what a publish compares new content with (it keeps what the
-- caller did not give and writes nothing when the content is unchanged) and what `qlsched apply`
-- plans against. Run by a publish under the project lock, so no publish of the project can move a
-- head meanwhile. Two branches, not "trigger_ids IS NULL OR trigger_id = ANY(trigger_ids)": the
-- generic plan a prepared statement may settle on cannot fold that OR, and read the whole project
-- to find one trigger (sequential scans: 18 ms at 20,000 triggers, where a key lookup takes
-- 0.1 ms). Here the named branch reaches each trigger by its key and the NULL test gates the other
-- once; NOT MATERIALIZED, so each branch's filter reaches the tables.
WITH heads AS NOT MATERIALIZED (
    SELECT t.trigger_id, tr.revision, tr.cron_spec, tr.timezone, tr.misfire_policy, tr.misfire_grace_ms, tr.enabled,
           tr.task_id, tr.task_revision, tr.content_digest, s.state_version, s.claim_version
    FROM control_core.triggers t
    JOIN control_core.trigger_revisions tr
      ON tr.project_id = t.project_id AND tr.trigger_id = t.trigger_id AND tr.revision = t.head_revision
    JOIN control_core.trigger_schedules s ON s.project_id = t.project_id AND s.trigger_id = t.trigger_id
    WHERE t.project_id = @project_id::text
)
SELECT * FROM heads WHERE trigger_id = ANY(sqlc.narg(trigger_ids)::text[])
UNION ALL
SELECT * FROM heads WHERE sqlc.narg(trigger_ids)::text[] IS NULL
ORDER BY trigger_id;

-- name: GetTaskHeads :many
-- The head revisions of a project's tasks (of one when task_id is given) with the execution
-- revision each pins (id and digest; the spec never comes back): a publish and `qlsched apply`
-- compare a spec's SpecDigest with execution_digest, and the retry policy and selector field by field.
SELECT t.task_id, t.head_revision, kr.execution_revision_id, e.digest AS execution_digest, kr.content_digest,
       kr.max_attempts, kr.retry_backoff_ms, kr.worker_selector
FROM control_core.tasks t
JOIN control_core.task_revisions kr
  ON kr.project_id = t.project_id AND kr.task_id = t.task_id AND kr.revision = t.head_revision
JOIN control_core.execution_revisions e ON e.execution_revision_id = kr.execution_revision_id
WHERE t.project_id = @project_id::text
  AND (sqlc.narg(task_id)::text IS NULL OR t.task_id = sqlc.narg(task_id)::text)
ORDER BY t.task_id;

-- name: SpecDigest :one
-- The digest an executor spec has as an execution revision (the function UpsertExecutionRevision
-- uses), so equal digests mean a publish would reuse the row.
SELECT control_core.execution_digest(@spec::jsonb)::text AS digest;

-- name: ListTriggers :many
-- One page of triggers with their head revision, schedule row and project state, in key order
-- strictly after the keyset (@after_project, @after_trigger) ('', '' for the first page): a range
-- of the schedules' primary key, read up to @max_rows (the caller asks for one row more than it
-- shows, to know whether there is a next page). Both filters optional.
SELECT s.project_id, s.trigger_id, s.trigger_revision, tr.cron_spec, tr.timezone, tr.misfire_policy, tr.misfire_grace_ms, tr.enabled,
       tr.task_id, tr.task_revision, tr.content_digest, tr.created_at_ms AS revision_created_at_ms,
       p.state AS project_state, s.next_fire_at_ms, s.last_scheduled_at_ms, s.state_version,
       s.claim_owner, s.claim_version, s.claim_expires_at_ms, s.updated_at_ms,
       control_core.db_now_ms()::bigint AS now_ms
FROM control_core.trigger_schedules s
JOIN control_core.trigger_revisions tr
  ON tr.project_id = s.project_id AND tr.trigger_id = s.trigger_id AND tr.revision = s.trigger_revision
JOIN control_core.projects p ON p.project_id = s.project_id
WHERE (sqlc.narg(project_id)::text IS NULL OR s.project_id = sqlc.narg(project_id)::text)
  AND (sqlc.narg(trigger_id)::text IS NULL OR s.trigger_id = sqlc.narg(trigger_id)::text)
  AND (s.project_id, s.trigger_id) > (@after_project::text, @after_trigger::text)
  -- the same bound on the revisions (implied by the join): otherwise the planner merge-joins
  -- from the first revision and walks every one before the page (as ConsoleProjectTriggers)
  AND (tr.project_id, tr.trigger_id) > (@after_project::text, @after_trigger::text)
ORDER BY s.project_id, s.trigger_id
LIMIT @max_rows::integer;

-- name: ListRuns :many
-- Runs newest first (created_at_ms, then run_id, both descending); every filter optional. since_ms
-- is an absolute lower bound of created_at_ms; within_ms a bound relative to the database's time
-- (now - within_ms), so "the last hour" is the database's hour. Per project, one backward range of
-- runs_project_created_idx, or of runs_project_state_created_idx with a state (pg-0020), read up
-- to @max_rows; across projects the projects' pages are merged, so the statement reads at most
-- @max_rows index entries per project whatever the history holds, and a filter that matches
-- nothing reads nothing. The counts of Attempts and Events are taken for the page only.
SELECT r.run_id, r.project_id, r.task_id, r.task_revision, r.trigger_id, r.trigger_revision, r.scheduled_for_ms,
       r.idempotency_key, r.state, r.queued_at_ms, r.created_at_ms,
       (SELECT count(*) FROM control_core.attempts a WHERE a.run_id = r.run_id)::bigint AS attempts,
       (SELECT count(*) FROM control_core.run_events e WHERE e.run_id = r.run_id)::bigint AS events
FROM (
    SELECT x.*
    FROM control_core.projects p
    CROSS JOIN LATERAL (
        SELECT r.run_id, r.project_id, r.task_id, r.task_revision, r.trigger_id, r.trigger_revision, r.scheduled_for_ms,
               r.idempotency_key, r.state, r.queued_at_ms, r.created_at_ms
        FROM control_core.runs r
        WHERE r.project_id = p.project_id
          AND (sqlc.narg(state)::text IS NULL OR r.state = sqlc.narg(state)::text)
          AND (sqlc.narg(since_ms)::bigint IS NULL OR r.created_at_ms >= sqlc.narg(since_ms)::bigint)
          AND (sqlc.narg(within_ms)::bigint IS NULL OR r.created_at_ms >= control_core.db_now_ms() - sqlc.narg(within_ms)::bigint)
        ORDER BY r.created_at_ms DESC, r.run_id DESC
        LIMIT @max_rows::integer
    ) x
    WHERE (sqlc.narg(project_id)::text IS NULL OR p.project_id = sqlc.narg(project_id)::text)
    ORDER BY x.created_at_ms DESC, x.run_id DESC
    LIMIT @max_rows::integer
) r
ORDER BY r.created_at_ms DESC, r.run_id DESC;

-- name: ListTriggerRuns :many
-- One trigger's Runs (in one project or in every project that has a trigger of that id), newest
-- occurrence first (scheduled_for_ms descending): per project a backward range of
-- runs_occurrence_key. The state and time filters are applied to the trigger's newest @walk
-- occurrences per project, so a filter that matches nothing reads at most @walk Runs per project
-- (a Run older than the walk is not found: the caller says so).
SELECT r.run_id, r.project_id, r.task_id, r.task_revision, r.trigger_id, r.trigger_revision, r.scheduled_for_ms,
       r.idempotency_key, r.state, r.queued_at_ms, r.created_at_ms,
       (SELECT count(*) FROM control_core.attempts a WHERE a.run_id = r.run_id)::bigint AS attempts,
       (SELECT count(*) FROM control_core.run_events e WHERE e.run_id = r.run_id)::bigint AS events
FROM (
    SELECT x.*
    FROM control_core.projects p
    CROSS JOIN LATERAL (
        SELECT w.*
        FROM (SELECT r.run_id, r.project_id, r.task_id, r.task_revision, r.trigger_id, r.trigger_revision, r.scheduled_for_ms,
                     r.idempotency_key, r.state, r.queued_at_ms, r.created_at_ms
              FROM control_core.runs r
              WHERE r.project_id = p.project_id AND r.trigger_id = @trigger_id::text
              ORDER BY r.scheduled_for_ms DESC
              LIMIT @walk::integer) w
        WHERE (sqlc.narg(state)::text IS NULL OR w.state = sqlc.narg(state)::text)
          AND (sqlc.narg(since_ms)::bigint IS NULL OR w.created_at_ms >= sqlc.narg(since_ms)::bigint)
          AND (sqlc.narg(within_ms)::bigint IS NULL OR w.created_at_ms >= control_core.db_now_ms() - sqlc.narg(within_ms)::bigint)
        ORDER BY w.scheduled_for_ms DESC
        LIMIT @max_rows::integer
    ) x
    WHERE (sqlc.narg(project_id)::text IS NULL OR p.project_id = sqlc.narg(project_id)::text)
    ORDER BY x.scheduled_for_ms DESC, x.project_id
    LIMIT @max_rows::integer
) r
ORDER BY r.scheduled_for_ms DESC, r.project_id;
