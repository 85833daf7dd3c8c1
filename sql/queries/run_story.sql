-- The story of one Run (`qlsched runs show`, issue 33): its admission, its offers, each Attempt
-- with its worker, lease and outcome, and its newest events. Read by package admin's Reader in one
-- REPEATABLE READ READ ONLY snapshot. Never selected: an Attempt's callback_token_hash, a worker
-- token's hash, the execution revision's spec (docs/dispatch.md: secrets). An Attempt's result is
-- the worker's report (exit status, output tail): what the operator came for, so it is selected.

-- name: RunStoryHead :one
-- The Run, its task revision's retry policy, and how many offers and events it has. Attempts of a
-- Run are at most its task revision's max_attempts (≤ 100) plus its hand-backs (≤ 16, pg-0023). The offer count probes
-- dispatch_offers_attempt_idx once per Attempt (the offers of one Run); the event count is one
-- probe of the (run_id, seq) index (seq counts 1, 2, … with no gap: every writer appends max+1).
SELECT r.run_id, r.project_id, r.task_id, r.task_revision, r.execution_revision_id, r.trigger_id, r.trigger_revision,
       r.scheduled_for_ms, r.idempotency_key, r.state, r.owner, r.queued_at_ms, r.cancel_requested_at_ms,
       r.finished_at_ms, r.created_at_ms, r.updated_at_ms, r.retry_at_ms, r.lease_version,
       kr.max_attempts, kr.retry_backoff_ms,
       (SELECT count(*) FROM control_core.attempts a
        JOIN control_core.dispatch_offers o ON o.attempt_id = a.attempt_id
        WHERE a.run_id = r.run_id)::bigint AS offers,
       coalesce((SELECT max(e.seq) FROM control_core.run_events e WHERE e.run_id = r.run_id), 0)::bigint AS events,
       control_core.db_now_ms()::bigint AS now_ms
FROM control_core.runs r
JOIN control_core.task_revisions kr
  ON kr.project_id = r.project_id AND kr.task_id = r.task_id AND kr.revision = r.task_revision
WHERE r.run_id = @run_id::uuid;

-- name: RunStoryAttempts :many
-- A Run's Attempts in order, each with its lease (an Attempt is granted at most one: its ACK) and
-- the session and token name of its worker; result and error are the worker's report and the
-- loop's reason, as recorded.
SELECT a.attempt_id, a.attempt_no, a.executor_kind, a.state, a.worker_id, a.worker_session_id, a.run_lease_id,
       a.offer_id, a.started_at_ms, a.finished_at_ms, a.created_at_ms, a.updated_at_ms, a.result, a.error,
       l.lease_version, l.state AS lease_state, l.granted_at_ms AS lease_granted_at_ms,
       l.expires_at_ms AS lease_expires_at_ms, l.ended_at_ms AS lease_ended_at_ms,
       s.state AS session_state, s.heartbeat_at_ms AS session_heartbeat_at_ms, t.name AS token_name
FROM control_core.attempts a
LEFT JOIN control_core.run_leases l ON l.run_lease_id = a.run_lease_id
LEFT JOIN control_core.worker_sessions s ON s.worker_session_id = a.worker_session_id
LEFT JOIN control_core.worker_tokens t ON t.worker_token_id = s.worker_token_id
WHERE a.run_id = @run_id::uuid
ORDER BY a.attempt_no
LIMIT @max_rows::integer;

-- name: RunStoryOffers :many
-- The newest @max_rows offers of a Run, newest first: the newest Attempt's first, each Attempt's
-- by offer time; with the worker each was made to.
SELECT o.offer_id, a.attempt_no, o.worker_session_id, s.worker_id, o.state, o.offered_at_ms, o.expires_at_ms,
       o.answered_at_ms
FROM control_core.attempts a
JOIN control_core.dispatch_offers o ON o.attempt_id = a.attempt_id
JOIN control_core.worker_sessions s ON s.worker_session_id = o.worker_session_id
WHERE a.run_id = @run_id::uuid
ORDER BY a.attempt_no DESC, o.offered_at_ms DESC, o.offer_id DESC
LIMIT @max_rows::integer;

-- name: RunStoryEvents :many
-- The newest @max_rows events of a Run, newest first: one backward range of the (run_id, seq) index.
SELECT e.event_id, e.seq, e.type, e.at_ms, e.detail
FROM control_core.run_events e
WHERE e.run_id = @run_id::uuid
ORDER BY e.seq DESC
LIMIT @max_rows::integer;
