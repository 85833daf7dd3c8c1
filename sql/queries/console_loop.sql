-- The web console's reads of the dispatch loop (`qlsched ui`, issue 33): the queue per project on
-- the overview. The workers page reads admin's WorkerSessions (workers.sql) and the Run page
-- admin's RunStory (run_story.sql); nothing of theirs is repeated here. Read in the overview's
-- REPEATABLE READ READ ONLY snapshot. Never selected: an executor spec, a token or its hash.

-- name: ConsoleQueueDepth :many
-- Per project: its queued Runs, counted up to @max_rows (a count equal to it means "at least"),
-- and the ready time of the head of its queue (the oldest: the backoff end for a retry, else the
-- scheduled time, else the queue time, or 0 when the queue is empty). The head is the first entry
-- of the partial runs_dispatch_queue_idx (pg-0022), which holds the queued Runs only, in the order
-- placement takes them (dispatch.sql's DispatchCandidates). The count is unordered, so it stops
-- at the cap: a range of that index or of runs_project_state_created_idx at (project, 'queued'),
-- whichever the planner takes, reads queued Runs only. The cost follows the queue (capped) and
-- the projects, never the Runs' history.
SELECT p.project_id, q.queued::bigint AS queued, coalesce(h.ready_ms, 0)::bigint AS oldest_ready_ms
FROM control_core.projects p
CROSS JOIN LATERAL (
    SELECT count(*) AS queued
    FROM (SELECT 1
          FROM control_core.runs r
          WHERE r.project_id = p.project_id AND r.state = 'queued'
          LIMIT @max_rows::integer) x
) q
LEFT JOIN LATERAL (
    SELECT coalesce(r.retry_at_ms, r.scheduled_for_ms, r.queued_at_ms) AS ready_ms
    FROM control_core.runs r
    WHERE r.project_id = p.project_id AND r.state = 'queued'
    ORDER BY r.project_id, coalesce(r.retry_at_ms, r.scheduled_for_ms, r.queued_at_ms), r.run_id
    LIMIT 1
) h ON true
ORDER BY p.project_id;
