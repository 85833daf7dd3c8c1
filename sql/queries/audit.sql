-- name: AuditExactlyOnce :many
-- The exactly-once audit of admitted occurrences, per trigger: Runs, occurrences, Runs whose
-- occurrence was admitted more than once, and misshapen Runs: not admitted as one Run whose
-- Events 1 and 2 are run.created and run.queued, with one Attempt 1 and Attempts numbered 1 … n
-- (a retry adds the next; execution adds Events after the second). It holds before and after
-- dispatch.
SELECT r.project_id, r.trigger_id::text AS trigger_id,
       count(*)::bigint AS runs,
       count(DISTINCT r.scheduled_for_ms)::bigint AS occurrences,
       (count(*) - count(DISTINCT (r.trigger_revision, r.scheduled_for_ms)))::bigint AS duplicates,
       count(*) FILTER (WHERE (SELECT count(*) FILTER (WHERE a.attempt_no = 1) <> 1 OR count(*) <> coalesce(max(a.attempt_no), 0)
                                 FROM control_core.attempts a WHERE a.run_id = r.run_id)
                           OR (SELECT count(*) FROM control_core.run_events e WHERE e.run_id = r.run_id
                                 AND ((e.seq = 1 AND e.type = 'run.created') OR (e.seq = 2 AND e.type = 'run.queued'))) <> 2)::bigint AS misshapen,
       min(r.scheduled_for_ms)::bigint AS first_ms, max(r.scheduled_for_ms)::bigint AS last_ms,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY r.queued_at_ms - r.scheduled_for_ms)::float8 AS lag_p50_ms,
       max(r.queued_at_ms - r.scheduled_for_ms)::bigint AS lag_max_ms
FROM control_core.runs r
WHERE r.trigger_id IS NOT NULL
GROUP BY r.project_id, r.trigger_id
ORDER BY r.project_id, r.trigger_id;
