-- Operator reads for the day-2 commands (project list, task list, runs show): read by package
-- admin's Reader in one REPEATABLE READ READ ONLY snapshot, as any role with SELECT on
-- control_core. Nothing here returns an executor spec (it may hold secrets), a claim token or a
-- callback token hash.

-- name: ListProjects :many
-- Every project, with its tasks counted up to @cap (a count at the cap means "at least"); its
-- triggers are counted by ProjectTriggerCounts (status.sql), in the same snapshot.
SELECT p.project_id, p.state, p.revision, p.created_at_ms, p.updated_at_ms,
       (SELECT count(*) FROM (SELECT 1 FROM control_core.tasks t
                              WHERE t.project_id = p.project_id ORDER BY t.project_id, t.task_id LIMIT @cap::integer) x)::bigint AS tasks
FROM control_core.projects p
ORDER BY p.project_id;

-- name: ListTasks :many
-- One page of tasks in key order strictly after the keyset (@after_project, @after_task) ('', ''
-- for the first page), a range of the tasks' primary key read up to @max_rows, each with its head
-- revision's execution revision (id and digest only) and how many trigger heads pin some revision
-- of the task, counted up to @cap (a count at the cap means "at least": a task that 100,000
-- triggers use costs @cap probes, not 100,000).
SELECT t.project_id, t.task_id, t.head_revision, kr.execution_revision_id, e.digest AS execution_digest,
       kr.content_digest, kr.max_attempts, kr.retry_backoff_ms, kr.worker_selector, t.created_at_ms, t.updated_at_ms,
       (SELECT count(*) FROM (SELECT 1 FROM control_core.trigger_revisions tr
                              JOIN control_core.trigger_schedules s
                                ON s.project_id = tr.project_id AND s.trigger_id = tr.trigger_id AND s.trigger_revision = tr.revision
                              WHERE tr.project_id = t.project_id AND tr.task_id = t.task_id
                              LIMIT @cap::integer) x)::bigint AS triggers
FROM control_core.tasks t
JOIN control_core.task_revisions kr
  ON kr.project_id = t.project_id AND kr.task_id = t.task_id AND kr.revision = t.head_revision
JOIN control_core.execution_revisions e ON e.execution_revision_id = kr.execution_revision_id
WHERE (sqlc.narg(project_id)::text IS NULL OR t.project_id = sqlc.narg(project_id)::text)
  AND (t.project_id, t.task_id) > (@after_project::text, @after_task::text)
ORDER BY t.project_id, t.task_id
LIMIT @max_rows::integer;

