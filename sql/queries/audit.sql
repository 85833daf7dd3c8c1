-- name: AuditExactlyOnce :many
-- The exactly-once audit of admitted occurrences, per trigger: Runs, occurrences, Runs whose
-- occurrence was admitted more than once, and Runs without exactly 1 Attempt and 2 Events.
SELECT r.project_id, r.trigger_id::text AS trigger_id,
       count(*)::bigint AS runs,
       count(DISTINCT r.scheduled_for_ms)::bigint AS occurrences,
       (count(*) - count(DISTINCT (r.trigger_revision, r.scheduled_for_ms)))::bigint AS duplicates,
       count(*) FILTER (WHERE (SELECT count(*) FROM control_core.attempts a WHERE a.run_id = r.run_id) <> 1
                           OR (SELECT count(*) FROM control_core.run_events e WHERE e.run_id = r.run_id) <> 2)::bigint AS misshapen,
       min(r.scheduled_for_ms)::bigint AS first_ms, max(r.scheduled_for_ms)::bigint AS last_ms,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY r.queued_at_ms - r.scheduled_for_ms)::float8 AS lag_p50_ms,
       max(r.queued_at_ms - r.scheduled_for_ms)::bigint AS lag_max_ms
FROM control_core.runs r
WHERE r.trigger_id IS NOT NULL
GROUP BY r.project_id, r.trigger_id
ORDER BY r.project_id, r.trigger_id;
