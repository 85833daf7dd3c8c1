-- Rollout queries: which triggers pin which revision of a task (issue 34). A trigger pins a task
-- revision; publishing a task does not move it; `qlsched task rollout` does, with the publish
-- path of publish.sql (BumpTriggerHead, InsertTriggerRevision, ResetSchedule).

-- name: TaskTriggerPins :many
-- The triggers whose head revision runs the task, with the task revision each pins, in id order:
-- revisions of the task by trigger_revisions_task_idx, kept when they are their trigger's head
-- and the trigger has its schedule row: an archived trigger has none (pg-0025 deletes it, and its
-- head never moves again), as in every list. Read through the schedule row, not archived_triggers,
-- so the query also serves a database not yet at pg-0025.
SELECT tr.trigger_id, tr.revision, tr.task_revision, tr.enabled
FROM control_core.trigger_revisions tr
JOIN control_core.triggers t
  ON t.project_id = tr.project_id AND t.trigger_id = tr.trigger_id AND t.head_revision = tr.revision
WHERE tr.project_id = @project_id::text AND tr.task_id = @task_id::text
  AND EXISTS (SELECT 1 FROM control_core.trigger_schedules s
              WHERE s.project_id = tr.project_id AND s.trigger_id = tr.trigger_id)
ORDER BY tr.trigger_id;
