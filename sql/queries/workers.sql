-- Admin queries of the closed loop (pg-0022, issue 32): worker tokens, the workers list and the
-- admin cancel of a Run. Run by the admin role. A token's hash never leaves the database through
-- these queries (only CreateWorkerToken takes one, as input); the token itself never reaches it.

-- name: CreateWorkerToken :one
-- worker_tokens_guard (pg-0022) stamps created_at_ms and clears revoked_at_ms; audit_worker_tokens
-- writes the worker_token.create audit row (id and name, never the hash).
INSERT INTO control_core.worker_tokens (worker_token_id, name, token_hash, created_at_ms)
VALUES (gen_random_uuid(), @name::text, @token_hash::text, control_core.db_now_ms())
RETURNING worker_token_id, name, created_at_ms;

-- name: RevokeWorkerTokens :many
-- Revokes the live tokens of one id or of one name (the other argument NULL): the guard stamps
-- revoked_at_ms, the audit trigger writes one worker_token.revoke row per token. A revoked token
-- is never touched again (the guard refuses it), so a second revoke updates nothing.
UPDATE control_core.worker_tokens
SET revoked_at_ms = control_core.db_now_ms()
WHERE revoked_at_ms IS NULL
  AND (worker_token_id = sqlc.narg(id)::uuid OR name = sqlc.narg(name)::text)
RETURNING worker_token_id, name;

-- name: CountWorkerTokens :one
-- How many tokens (live or revoked) one id or one name has: tells "already revoked" from "no such token".
SELECT count(*)::bigint AS tokens
FROM control_core.worker_tokens
WHERE worker_token_id = sqlc.narg(id)::uuid OR name = sqlc.narg(name)::text;

-- name: ListWorkerTokens :many
-- Every token by name, oldest first, up to @max_rows; the hash is not selected.
SELECT worker_token_id, name, created_at_ms, revoked_at_ms
FROM control_core.worker_tokens
ORDER BY name, created_at_ms, worker_token_id
LIMIT @max_rows::integer;

-- name: ListWorkerSessions :many
-- Worker sessions with what they hold in flight (live offers, active leases) and their token's
-- name, in one statement, up to @max_rows. Live sessions (state active or draining, not past
-- expires_at_ms by the database's time) are one range of worker_sessions_live_expiry_idx, so the
-- read costs the live fleet, never the session history; with @all every session is read (newest
-- first: the history, a scan). Two branches gated by @all, as GetTriggerHeads, so the plan of
-- each keeps its own index.
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms),
picked AS (
    (SELECT s.worker_session_id   -- db_now_ms() is the statement's time, as obs's: an index bound
     FROM control_core.worker_sessions s
     WHERE NOT @all_sessions::boolean AND s.state IN ('active', 'draining') AND s.expires_at_ms > control_core.db_now_ms()
     ORDER BY s.expires_at_ms DESC
     LIMIT @max_rows::integer)
    UNION ALL
    (SELECT s.worker_session_id
     FROM control_core.worker_sessions s
     WHERE @all_sessions::boolean
     ORDER BY s.created_at_ms DESC
     LIMIT @max_rows::integer)
)
SELECT s.worker_session_id, s.worker_id, s.state, s.capacity, s.labels, s.heartbeat_at_ms, s.expires_at_ms,
       s.created_at_ms, s.closed_at_ms, t.name AS token_name,
       (SELECT count(*) FROM control_core.dispatch_offers o
        WHERE o.worker_session_id = s.worker_session_id AND o.state = 'offered' AND o.expires_at_ms > obs.now_ms)::bigint AS offers,
       (SELECT count(*) FROM control_core.run_leases l
        WHERE l.worker_session_id = s.worker_session_id AND l.state = 'active')::bigint AS leases,
       obs.now_ms::bigint AS now_ms
FROM picked p
JOIN control_core.worker_sessions s ON s.worker_session_id = p.worker_session_id
JOIN control_core.worker_tokens t ON t.worker_token_id = s.worker_token_id
CROSS JOIN obs
ORDER BY s.created_at_ms DESC, s.worker_session_id;

-- name: CancelRun :one
-- control_core.cancel_run (pg-0022, SECURITY DEFINER, EXECUTE to the admin role only) applies
-- transition K to a live Run, writes its run.cancelled event and its run.cancel audit row; a
-- terminal Run comes back unchanged (from_state = run_state); an unknown id raises no_data_found.
SELECT c.from_state::text AS from_state, c.run_state::text AS run_state
FROM control_core.cancel_run(@run_id::uuid, @reason::text) c;
