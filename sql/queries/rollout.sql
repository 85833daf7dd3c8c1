-- Rollout queries: which triggers pin which revision of a task (issue 34). A trigger pins a task
-- revision; publishing a task does not move it; `qlsched task rollout` does, with the publish
-- path of publish.sql (BumpTriggerHead, InsertTriggerRevision, ResetSchedule).

-- name: TaskTriggerPins :many
-- The triggers whose head revision runs the task, with the task revision each pins, in id order:
-- revisions of the task by trigger_revisions_task_idx, kept when they are their trigger's head.
SELECT tr.trigger_id, tr.revision, tr.task_revision, tr.enabled
FROM control_core.trigger_revisions tr
JOIN control_core.triggers t
  ON t.project_id = tr.project_id AND t.trigger_id = tr.trigger_id AND t.head_revision = tr.revision
WHERE tr.project_id = @project_id::text AND tr.task_id = @task_id::text
ORDER BY tr.trigger_id;
