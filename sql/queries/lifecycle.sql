-- Definition lifecycle (issue 34, pg-0025): run a trigger now, archive a trigger, prune old Runs.
-- Each is one SECURITY DEFINER function, EXECUTE to the admin role only; they write their own
-- audit rows ("by": the transaction's control_core.audit_reason).

-- name: RunNow :one
-- control_core.run_now: one queued manual Run of the trigger's head revision, verified as an
-- admission verifies (project active, every digest recomputed), keyed
-- ql3:now:v1:<trigger>:<revision>:<request>; the same request again returns its Run (already).
SELECT n.run_id::uuid AS run_id, n.trigger_revision::bigint AS trigger_revision,
       n.idempotency_key::text AS idempotency_key, n.already::boolean AS already
FROM control_core.run_now(@project_id::text, @trigger_id::text, @request::uuid, @reason::text) n;

-- name: ArchiveTrigger :one
-- control_core.archive_trigger: the schedule row deleted, the archive recorded (already: it was).
SELECT a.revision::bigint AS revision, a.archived_at_ms::bigint AS archived_at_ms, a.already::boolean AS already
FROM control_core.archive_trigger(@project_id::text, @trigger_id::text) a;

-- name: PruneRuns :one
-- control_core.prune_runs: one batch of old terminal Runs and their rows deleted (or, dry_run,
-- counted), with its run.prune audit row.
SELECT p.runs::bigint AS runs, p.attempts::bigint AS attempts, p.events::bigint AS events,
       p.leases::bigint AS leases, p.offers::bigint AS offers, p.cutoff_ms::bigint AS cutoff_ms
FROM control_core.prune_runs(@project_id::text, @older_than_ms::bigint, @batch::integer, @dry_run::boolean) p;

-- name: RunNowByRequest :many
-- The run-now Runs a request made, whatever trigger and revision their keys name
-- (ql3:now:v1:<trigger>:<revision>:<request>): run_now looks its key up at the head revision
-- only, so a request retried after the head moved, or reused for another trigger, would make a
-- second Run; admin.RunNow asks this first. Read through the project's key index.
SELECT r.run_id::uuid AS run_id, r.idempotency_key::text AS idempotency_key
FROM control_core.runs r
WHERE r.project_id = @project_id::text AND r.trigger_id IS NULL AND r.owner = 'operator'
  AND r.idempotency_key LIKE 'ql3:now:v1:%:' || CAST(@request::uuid AS text)
ORDER BY r.created_at_ms, r.run_id;
