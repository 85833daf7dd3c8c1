-- Operator views: read by `qlsched status` (any role with SELECT) and the backlog gauge.

-- name: Backlog :one
-- Due and unclaimed schedule rows of active projects and enabled triggers, counted with the
-- claim's index range (coalesce(next_fire_at_ms, -1) <= now) and capped, so a huge backlog costs
-- a bounded scan; with the oldest due occurrence.
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms),
due AS (
    SELECT s.next_fire_at_ms
    FROM control_core.trigger_schedules s CROSS JOIN obs
    WHERE coalesce(s.next_fire_at_ms, -1) <= obs.now_ms
      AND (s.claim_token IS NULL OR s.claim_expires_at_ms <= obs.now_ms)
    ORDER BY coalesce(s.next_fire_at_ms, -1)
    LIMIT @cap::integer
)
SELECT (SELECT count(*) FROM due)::bigint AS due_unclaimed,
       coalesce((SELECT min(next_fire_at_ms) FROM due), -1)::bigint AS oldest_due_ms, -- -1: none (or only uninitialised rows)
       obs.now_ms
FROM obs;

-- name: ProjectStatus :many
-- Per project: triggers, enabled ones, due and unclaimed, the oldest overdue occurrence, live
-- claims, and the last admission.
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms)
SELECT p.project_id, p.state,
       count(s.trigger_id)::bigint AS triggers,
       count(s.trigger_id) FILTER (WHERE tr.enabled)::bigint AS enabled,
       count(s.trigger_id) FILTER (WHERE tr.enabled AND s.next_fire_at_ms <= obs.now_ms
                                   AND (s.claim_token IS NULL OR s.claim_expires_at_ms <= obs.now_ms))::bigint AS backlog,
       coalesce(min(s.next_fire_at_ms) FILTER (WHERE tr.enabled AND s.next_fire_at_ms <= obs.now_ms), 0)::bigint AS oldest_overdue_ms, -- 0: none
       count(s.trigger_id) FILTER (WHERE s.claim_expires_at_ms > obs.now_ms)::bigint AS live_claims,
       coalesce((SELECT max(r.queued_at_ms) FROM control_core.runs r WHERE r.project_id = p.project_id), 0)::bigint AS last_admit_ms, -- 0: never
       obs.now_ms
FROM control_core.projects p
CROSS JOIN obs
LEFT JOIN control_core.trigger_schedules s ON s.project_id = p.project_id
LEFT JOIN control_core.trigger_revisions tr
  ON tr.project_id = s.project_id AND tr.trigger_id = s.trigger_id AND tr.revision = s.trigger_revision
GROUP BY p.project_id, p.state, obs.now_ms
ORDER BY p.project_id;

-- name: LiveClaimsByOwner :many
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms)
SELECT s.claim_owner::text AS owner, count(*)::bigint AS claims, min(s.claim_expires_at_ms - obs.now_ms)::bigint AS soonest_expiry_in_ms
FROM control_core.trigger_schedules s CROSS JOIN obs
WHERE s.claim_expires_at_ms > obs.now_ms
GROUP BY s.claim_owner
ORDER BY s.claim_owner;
