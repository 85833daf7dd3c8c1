-- Schedules as code (`qlsched apply`): the heads a plan compares a schedules file with. Read by any
-- role with SELECT on control_core (a --check), or by the admin role inside the apply transaction,
-- after it took the project locks (admin/apply.go explains the order).

-- name: ApplyProjects :many
SELECT project_id, state, revision FROM control_core.projects
WHERE project_id = ANY(@project_ids::text[])
ORDER BY project_id;

-- name: ApplyTaskHeads :many
-- Every task of the projects with its head revision and the digest of the execution revision the
-- head pins (the sha256 of the spec's jsonb text, as UpsertExecutionRevision computes it).
SELECT t.project_id, t.task_id, t.head_revision, e.digest AS execution_digest
FROM control_core.tasks t
JOIN control_core.task_revisions tr
  ON tr.project_id = t.project_id AND tr.task_id = t.task_id AND tr.revision = t.head_revision
JOIN control_core.execution_revisions e ON e.execution_revision_id = tr.execution_revision_id
WHERE t.project_id = ANY(@project_ids::text[])
ORDER BY t.project_id, t.task_id;

-- name: ApplyTriggerHeads :many
-- Every trigger of the projects with all the fields of its head revision.
SELECT t.project_id, t.trigger_id, t.head_revision, tr.cron_spec, tr.timezone, tr.misfire_policy, tr.enabled,
       tr.task_id, tr.task_revision
FROM control_core.triggers t
JOIN control_core.trigger_revisions tr
  ON tr.project_id = t.project_id AND tr.trigger_id = t.trigger_id AND tr.revision = t.head_revision
WHERE t.project_id = ANY(@project_ids::text[])
ORDER BY t.project_id, t.trigger_id;

-- name: SpecDigest :one
-- The digest an executor spec would have as an execution revision: the same expression as
-- UpsertExecutionRevision (publish.sql), so equal digests mean the publish would reuse the row.
SELECT encode(sha256(convert_to((@spec::jsonb)::text, 'UTF8')), 'hex')::text AS digest;
