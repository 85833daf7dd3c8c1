-- Missed occurrences of one trigger (pg-0024): what the scheduler's fenced writes counted into its
-- schedule row, read by `qlsched trigger show` and the console's trigger view in the same
-- snapshot as the rest of the trigger.

-- name: TriggerMissed :one
-- missed_total: the occurrences the misfire decision passed over without a Run (older than the
-- grace: under skip all of them, under fire_once all but the one fired) since the row was
-- created; last_missed_for_ms: the latest of them (NULL: none ever).
SELECT s.missed_total, s.last_missed_for_ms
FROM control_core.trigger_schedules s
WHERE s.project_id = @project_id::text AND s.trigger_id = @trigger_id::text;
