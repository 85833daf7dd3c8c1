-- The closed loop's database gauges (issue 33): read by every dispatcher replica in the background,
-- once per interval, never by a scrape. They are global facts of the database, the same on every
-- replica (alert on them with max()). Both reads are bounded whatever the size of history: they walk
-- only partial indexes that hold the live rows (the queue, live sessions, live offers and leases).

-- name: LoopQueue :many
-- Per project with queued Runs (a skip scan of runs_dispatch_queue_idx, as placement's, at most
-- max_projects projects in project order): its queued Runs, counted along the index with one
-- budget of cap rows for the whole read (each project's count is exact until the budget is spent;
-- past it a project counts at most 1, "at least one"), and its oldest queued Run's ready time (the
-- index key: the backoff end for a retry, else the scheduled time, else the queue time). Only active
-- projects are returned: placement never takes a paused or archived project's Runs, and a gauge on
-- them would alert for ever. Their Runs are not counted (a paused project's backlog spent the
-- budget, and every active project after it counted 1); they still take a step of the project bound.
WITH RECURSIVE lim AS (SELECT @cap::bigint AS cap, @max_projects::integer AS max_projects),
heads (project_id, n, oldest_ready_ms, queued, budget) AS (
    SELECT f.project_id, 1, f.ready_ms, c.queued, lim.cap - c.queued
    FROM lim CROSS JOIN LATERAL (SELECT r.project_id, coalesce(r.retry_at_ms, r.scheduled_for_ms, r.queued_at_ms) AS ready_ms
          FROM control_core.runs r
          WHERE r.state = 'queued'
          ORDER BY r.project_id, coalesce(r.retry_at_ms, r.scheduled_for_ms, r.queued_at_ms), r.run_id
          LIMIT 1) f
    CROSS JOIN LATERAL (
        SELECT count(*) AS queued
        FROM (SELECT 1 FROM control_core.runs r
              WHERE r.state = 'queued' AND r.project_id = f.project_id
                AND (SELECT p.state FROM control_core.projects p WHERE p.project_id = f.project_id) = 'active'
              ORDER BY r.project_id, coalesce(r.retry_at_ms, r.scheduled_for_ms, r.queued_at_ms), r.run_id
              LIMIT greatest(lim.cap, 1)) x) c
  UNION ALL
    SELECT f.project_id, h.n + 1, f.ready_ms, c.queued, h.budget - c.queued
    FROM heads h CROSS JOIN lim
    CROSS JOIN LATERAL (
        SELECT r.project_id, coalesce(r.retry_at_ms, r.scheduled_for_ms, r.queued_at_ms) AS ready_ms
        FROM control_core.runs r
        WHERE r.state = 'queued' AND r.project_id > h.project_id
        ORDER BY r.project_id, coalesce(r.retry_at_ms, r.scheduled_for_ms, r.queued_at_ms), r.run_id
        LIMIT 1) f
    CROSS JOIN LATERAL (
        SELECT count(*) AS queued
        FROM (SELECT 1 FROM control_core.runs r
              WHERE r.state = 'queued' AND r.project_id = f.project_id
                AND (SELECT p.state FROM control_core.projects p WHERE p.project_id = f.project_id) = 'active'
              ORDER BY r.project_id, coalesce(r.retry_at_ms, r.scheduled_for_ms, r.queued_at_ms), r.run_id
              LIMIT greatest(h.budget, 1)) x) c
    WHERE h.n < lim.max_projects
)
SELECT h.project_id::text AS project_id, h.queued::bigint AS queued, h.oldest_ready_ms::bigint AS oldest_ready_ms,
       control_core.db_now_ms()::bigint AS now_ms
FROM heads h
JOIN control_core.projects p ON p.project_id = h.project_id AND p.state = 'active'
ORDER BY h.project_id;

-- name: LoopWorkers :one
-- Live worker sessions (unexpired, along worker_sessions_live_expiry_idx, at most cap of them) by
-- state, and the free capacity of the active ones: capacity minus live offers and active leases
-- (the Offer's own arithmetic; a draining session takes no offers, so it has none).
WITH live AS (
    SELECT s.worker_session_id, s.state, s.capacity
    FROM control_core.worker_sessions s
    WHERE s.state IN ('active', 'draining') AND s.expires_at_ms > control_core.db_now_ms()
    ORDER BY s.expires_at_ms
    LIMIT @cap::integer
)
SELECT count(*) FILTER (WHERE live.state = 'active')::bigint AS active,
       count(*) FILTER (WHERE live.state = 'draining')::bigint AS draining,
       coalesce(sum(greatest(live.capacity
                 - (SELECT count(*) FROM control_core.dispatch_offers o
                    WHERE o.worker_session_id = live.worker_session_id AND o.state = 'offered')
                 - (SELECT count(*) FROM control_core.run_leases l
                    WHERE l.worker_session_id = live.worker_session_id AND l.state = 'active'), 0))
                FILTER (WHERE live.state = 'active'), 0)::bigint AS free_capacity
FROM live;
