-- The dispatcher's transitions (docs/dispatch.md; design of issue 32, §1.2). Each transition is
-- ONE statement run in a READ COMMITTED transaction of its own: the Run is locked first by a CTE
-- of its own (lock order Run → Attempt → Offer → Lease → Session), every UPDATE repeats its
-- precondition in its WHERE (EvalPlanQual re-checks it on the newest row version), later CTEs join
-- the previous CTE's RETURNING, so a lost race writes nothing. A Run whose state changes gets
-- exactly one run_events row, seq = max + 1 under the Run lock. now is control_core.db_now_ms()
-- once per statement. A statement that wrote nothing is a lost fence: the store reads
-- DispatchDiagnosis to say which.

-- name: LockTokenRegistrations :exec
-- Taken before Register in the same READ COMMITTED transaction: registrations of one token run one
-- after the other, so Register's snapshot, taken after this lock, counts every session the ones
-- before it opened (the runtime role may not lock worker_tokens rows; an advisory lock needs no
-- grant). Class 0x716c7372 ('qlsr') keeps the key space apart from any other advisory lock.
SELECT pg_advisory_xact_lock(1902932850, hashtext(@token_hash::text));

-- name: Register :one
-- Opens a session for a live token (T) that holds fewer than max_sessions live sessions (active or
-- draining, unexpired). No row: the token is unknown or revoked, or at its bound.
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms),
tok AS (
    SELECT t.worker_token_id FROM control_core.worker_tokens t
    WHERE t.token_hash = @token_hash::text AND t.revoked_at_ms IS NULL
)
INSERT INTO control_core.worker_sessions (worker_session_id, worker_id, state, capacity, heartbeat_at_ms,
                                          expires_at_ms, created_at_ms, worker_token_id, labels, protocol)
SELECT gen_random_uuid(), @worker_id::text, 'active', @capacity::integer, obs.now_ms,
       obs.now_ms + @lease_ttl_ms::bigint, obs.now_ms, tok.worker_token_id, @labels::jsonb, @protocol::integer
FROM tok, obs
WHERE (SELECT count(*) FROM control_core.worker_sessions s
       WHERE s.worker_token_id = tok.worker_token_id AND s.state IN ('active', 'draining')
         AND s.expires_at_ms > obs.now_ms) < @max_sessions::integer
RETURNING worker_session_id, (expires_at_ms - heartbeat_at_ms)::bigint AS expires_in_ms;

-- name: SessionForToken :one
-- A session of the token with its state judged against database time (a read: polls and
-- diagnosis). No row: no such session for this live token.
SELECT s.worker_session_id, s.worker_id, s.capacity, s.labels,
       (CASE WHEN s.state IN ('active', 'draining') AND s.expires_at_ms <= control_core.db_now_ms()
             THEN 'expired' ELSE s.state END)::text AS state,
       (s.expires_at_ms - control_core.db_now_ms())::bigint AS expires_in_ms
FROM control_core.worker_sessions s
JOIN control_core.worker_tokens t ON t.worker_token_id = s.worker_token_id
WHERE s.worker_session_id = @session_id::uuid AND t.token_hash = @token_hash::text AND t.revoked_at_ms IS NULL;

-- name: TokenLive :one
SELECT EXISTS (SELECT 1 FROM control_core.worker_tokens t
               WHERE t.token_hash = @token_hash::text AND t.revoked_at_ms IS NULL)::boolean AS live;

-- name: DispatchCandidates :many
-- The fair placement read (read-only; design §3.2): a skip scan of runs_dispatch_queue_idx over
-- at most max_projects projects after the cursor, then per project the oldest ready Runs this
-- session may take (labels ⊇ the revision's selector, never rejected by it), at most
-- scan_cap of them, round robin (every project's oldest before any project's second). The
-- session's filters apply inside the scan, before its bound: Runs it may not take never hide
-- younger ones it may (they cost reading past them instead). Stale by design: Offer re-checks
-- everything under lock. Each step of the skip scan orders by the queue index's whole key (not
-- min(project_id)), so no other index of runs can serve it: with half a table queued, the planner
-- once walked a project's finished history through runs_task_revision_idx for min().
WITH RECURSIVE obs AS (SELECT control_core.db_now_ms() AS now_ms),
heads (project_id, n) AS (
    SELECT (SELECT r.project_id FROM control_core.runs r
            WHERE r.state = 'queued' AND r.project_id > @after::text
            ORDER BY r.project_id, coalesce(r.retry_at_ms, r.scheduled_for_ms, r.queued_at_ms), r.run_id LIMIT 1), 1
  UNION ALL
    SELECT (SELECT r.project_id FROM control_core.runs r
            WHERE r.state = 'queued' AND r.project_id > h.project_id
            ORDER BY r.project_id, coalesce(r.retry_at_ms, r.scheduled_for_ms, r.queued_at_ms), r.run_id LIMIT 1), h.n + 1
    FROM heads h WHERE h.project_id IS NOT NULL AND h.n < @max_projects::integer
),
cand AS (
    SELECT h.project_id, h.n, c.run_id, c.rk
    FROM heads h
    JOIN control_core.projects p ON p.project_id = h.project_id AND p.state = 'active'
    CROSS JOIN LATERAL (
        SELECT w.run_id, row_number() OVER (ORDER BY w.ready, w.run_id) AS rk
        FROM (SELECT r.run_id, coalesce(r.retry_at_ms, r.scheduled_for_ms, r.queued_at_ms) AS ready
              FROM control_core.runs r
              JOIN control_core.task_revisions kr
                ON kr.project_id = r.project_id AND kr.task_id = r.task_id AND kr.revision = r.task_revision
              CROSS JOIN obs
              WHERE r.project_id = h.project_id AND r.state = 'queued'
                AND coalesce(r.retry_at_ms, r.scheduled_for_ms, r.queued_at_ms) <= obs.now_ms
                AND @labels::jsonb @> kr.worker_selector
                AND NOT EXISTS (SELECT 1 FROM control_core.attempts a JOIN control_core.dispatch_offers o
                                ON o.attempt_id = a.attempt_id AND o.worker_session_id = @session_id::uuid
                                   AND o.state = 'rejected'
                                WHERE a.run_id = r.run_id AND a.state = 'claimed')
              ORDER BY coalesce(r.retry_at_ms, r.scheduled_for_ms, r.queued_at_ms), r.run_id
              LIMIT least(@scan_cap::integer, @slots::integer)) w) c
)
SELECT cand.run_id::uuid AS run_id, cand.project_id::text AS project_id FROM cand
ORDER BY cand.rk, cand.n
LIMIT @slots::integer;

-- name: Offer :many
-- P and P′ (design §3.3): the session (T + S, locked, so placements for one session serialise and
-- its capacity holds), then the candidates' Runs in candidate order with SKIP LOCKED, no more of
-- them than the session has slots free (a spare candidate locked here and not offered would be
-- skipped by another dispatcher's offer, whose poll then waits for a probe), each
-- re-verified (queued, project active, ready, newest Attempt claimed in shape, labels ⊇ selector,
-- never rejected by this session: an offer that expired unanswered may come back to it) and its
-- task and execution digests recomputed. At most
-- the session's free capacity is offered; a Run whose revision no longer recomputes is failed
-- closed (P′). Returns the offers made (corrupt ones are not returned).
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms),
sess AS (
    SELECT s.worker_session_id, s.worker_id, s.labels,
           s.capacity
             - (SELECT count(*) FROM control_core.dispatch_offers o
                WHERE o.worker_session_id = s.worker_session_id AND o.state = 'offered')
             - (SELECT count(*) FROM control_core.run_leases l
                WHERE l.worker_session_id = s.worker_session_id AND l.state = 'active') AS free
    FROM control_core.worker_sessions s
    JOIN control_core.worker_tokens t ON t.worker_token_id = s.worker_token_id
    CROSS JOIN obs
    WHERE s.worker_session_id = @session_id::uuid AND s.state = 'active' AND s.expires_at_ms > obs.now_ms
      AND t.token_hash = @token_hash::text AND t.revoked_at_ms IS NULL
    FOR NO KEY UPDATE OF s
),
locked AS (
    SELECT r.run_id, r.project_id, r.task_id, r.task_revision, r.execution_revision_id, r.trigger_id,
           r.scheduled_for_ms, i.ord, i.callback_hash
    FROM ROWS FROM (unnest(@run_ids::uuid[]), unnest(@callback_hashes::text[])) WITH ORDINALITY AS i (run_id, callback_hash, ord)
    JOIN control_core.runs r ON r.run_id = i.run_id
    JOIN control_core.projects p ON p.project_id = r.project_id
    CROSS JOIN obs
    WHERE r.state = 'queued' AND p.state = 'active'
      AND coalesce(r.retry_at_ms, r.scheduled_for_ms, r.queued_at_ms) <= obs.now_ms
      AND EXISTS (SELECT 1 FROM sess)
    ORDER BY i.ord
    LIMIT (SELECT greatest(sess.free, 0) FROM sess)
    FOR UPDATE OF r SKIP LOCKED
),
checked AS (
    SELECT l.run_id, l.project_id, l.task_id, l.task_revision, l.trigger_id, l.scheduled_for_ms, l.ord,
           l.callback_hash, a.attempt_id, a.attempt_no, kr.max_attempts, er.spec,
           (kr.content_digest = control_core.task_digest(kr.task_id, kr.revision, er.execution_revision_id,
                                                         er.digest, kr.max_attempts, kr.retry_backoff_ms, kr.worker_selector)
            AND er.digest = control_core.execution_digest(er.spec)
            AND er.executor_kind = 'remote_worker') AS digests_ok
    FROM locked l
    JOIN control_core.attempts a ON a.run_id = l.run_id AND a.state = 'claimed'
         AND control_core.attempt_live_shape(a.state, a.worker_id, a.worker_session_id, a.offer_id, a.run_lease_id,
                                             a.callback_token_hash, a.started_at_ms, a.finished_at_ms, a.result, a.error)
         AND a.attempt_no = (SELECT max(a2.attempt_no) FROM control_core.attempts a2 WHERE a2.run_id = l.run_id)
    JOIN control_core.task_revisions kr
      ON kr.project_id = l.project_id AND kr.task_id = l.task_id AND kr.revision = l.task_revision
    JOIN control_core.execution_revisions er
      ON er.execution_revision_id = l.execution_revision_id AND er.execution_revision_id = kr.execution_revision_id
    CROSS JOIN sess
    WHERE sess.labels @> kr.worker_selector
      AND NOT EXISTS (SELECT 1 FROM control_core.dispatch_offers o
                      WHERE o.attempt_id = a.attempt_id AND o.worker_session_id = sess.worker_session_id
                        AND o.state = 'rejected')
),
chosen AS (
    SELECT c.*, gen_random_uuid() AS offer_id
    FROM (SELECT c.*, row_number() OVER (ORDER BY c.ord) AS k FROM checked c WHERE c.digests_ok) c, sess
    WHERE c.k <= sess.free
),
corrupt AS (SELECT c.run_id, c.attempt_id, c.attempt_no FROM checked c WHERE NOT c.digests_ok),
ins_offer AS (
    INSERT INTO control_core.dispatch_offers (offer_id, attempt_id, worker_session_id, state, offered_at_ms, expires_at_ms)
    SELECT ch.offer_id, ch.attempt_id, sess.worker_session_id, 'offered', obs.now_ms, obs.now_ms + @offer_ttl_ms::bigint
    FROM chosen ch, sess, obs
    RETURNING offer_id, attempt_id
),
att AS (
    UPDATE control_core.attempts a
    SET state = 'dispatching', worker_id = sess.worker_id, worker_session_id = sess.worker_session_id,
        offer_id = io.offer_id, callback_token_hash = ch.callback_hash,
        updated_at_ms = greatest(a.updated_at_ms, obs.now_ms)
    FROM ins_offer io JOIN chosen ch ON ch.offer_id = io.offer_id, sess, obs
    WHERE a.attempt_id = io.attempt_id AND a.state = 'claimed'
    RETURNING a.run_id
),
run AS (
    UPDATE control_core.runs r SET state = 'dispatching', updated_at_ms = greatest(r.updated_at_ms, obs.now_ms)
    FROM att, obs
    WHERE r.run_id = att.run_id AND r.state = 'queued'
    RETURNING r.run_id
),
ev AS (
    INSERT INTO control_core.run_events (event_id, run_id, seq, type, at_ms, detail)
    SELECT gen_random_uuid(), run.run_id,
           (SELECT coalesce(max(e.seq), 0) + 1 FROM control_core.run_events e WHERE e.run_id = run.run_id),
           'run.dispatching', obs.now_ms,
           jsonb_build_object('attempt_no', ch.attempt_no, 'offer_id', ch.offer_id, 'worker', sess.worker_id,
                              'session_id', sess.worker_session_id)
    FROM run JOIN chosen ch ON ch.run_id = run.run_id, sess, obs
),
bad_att AS (
    UPDATE control_core.attempts a
    SET state = 'failed', finished_at_ms = obs.now_ms,
        error = jsonb_build_object('kind', 'handler', 'reason', 'revision_digest_mismatch'),
        updated_at_ms = greatest(a.updated_at_ms, obs.now_ms)
    FROM corrupt c, obs
    WHERE a.attempt_id = c.attempt_id AND a.state = 'claimed'
    RETURNING a.run_id
),
bad_run AS (
    UPDATE control_core.runs r SET state = 'failed', finished_at_ms = obs.now_ms,
                                   updated_at_ms = greatest(r.updated_at_ms, obs.now_ms)
    FROM bad_att, obs
    WHERE r.run_id = bad_att.run_id AND r.state = 'queued'
    RETURNING r.run_id
),
bad_ev AS (
    INSERT INTO control_core.run_events (event_id, run_id, seq, type, at_ms, detail)
    SELECT gen_random_uuid(), bad_run.run_id,
           (SELECT coalesce(max(e.seq), 0) + 1 FROM control_core.run_events e WHERE e.run_id = bad_run.run_id),
           'run.failed', obs.now_ms,
           jsonb_build_object('reason', 'revision_digest_mismatch', 'attempt_no', c.attempt_no)
    FROM bad_run JOIN corrupt c ON c.run_id = bad_run.run_id, obs
)
SELECT ch.offer_id::uuid AS offer_id, ch.run_id::uuid AS run_id, ch.attempt_id::uuid AS attempt_id,
       ch.attempt_no::integer AS attempt_no, ch.max_attempts::integer AS max_attempts, ch.spec::jsonb AS spec,
       ch.project_id::text AS project_id, ch.task_id::text AS task_id, ch.task_revision::bigint AS task_revision,
       ch.trigger_id AS trigger_id, ch.scheduled_for_ms AS scheduled_for_ms,
       ch.callback_hash::text AS callback_hash, @offer_ttl_ms::bigint AS expires_in_ms,
       (SELECT count(*) FROM run)::bigint AS placed
FROM chosen ch
JOIN run ON run.run_id = ch.run_id
ORDER BY ch.ord;

-- name: SessionFree :one
-- Whether the session exists for this token and its free capacity (the Offer's sess CTE as a read),
-- for the store to tell "no capacity" from a failed session fence.
SELECT s.capacity::bigint
         - (SELECT count(*) FROM control_core.dispatch_offers o
            WHERE o.worker_session_id = s.worker_session_id AND o.state = 'offered')
         - (SELECT count(*) FROM control_core.run_leases l
            WHERE l.worker_session_id = s.worker_session_id AND l.state = 'active') AS free
FROM control_core.worker_sessions s
JOIN control_core.worker_tokens t ON t.worker_token_id = s.worker_token_id
WHERE s.worker_session_id = @session_id::uuid AND t.token_hash = @token_hash::text AND t.revoked_at_ms IS NULL;

-- name: Ack :one
-- A: T, S active, O (offered, unexpired, addressed to S), C; Run dispatching. Grants the lease
-- (lease_version = runs.lease_version + 1) and moves Attempt and Run to running.
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms),
run_lock AS (
    SELECT r.run_id, r.lease_version,
           greatest(r.queued_at_ms, coalesce(r.retry_at_ms, r.scheduled_for_ms, r.queued_at_ms)) AS ready_at_ms
    FROM control_core.runs r
    WHERE r.run_id = (SELECT a.run_id FROM control_core.attempts a WHERE a.offer_id = @offer_id::uuid)
      AND r.state = 'dispatching'
    FOR UPDATE
),
cur AS (
    SELECT r.run_id, r.lease_version, r.ready_at_ms, a.attempt_id, a.attempt_no, o.offer_id, s.worker_session_id, s.worker_id
    FROM control_core.dispatch_offers o
    JOIN control_core.attempts a ON a.attempt_id = o.attempt_id AND a.offer_id = o.offer_id
    JOIN run_lock r ON r.run_id = a.run_id
    JOIN control_core.worker_sessions s ON s.worker_session_id = o.worker_session_id
    JOIN control_core.worker_tokens t ON t.worker_token_id = s.worker_token_id
    CROSS JOIN obs
    WHERE o.offer_id = @offer_id::uuid AND s.worker_session_id = @session_id::uuid
      AND t.token_hash = @token_hash::text AND t.revoked_at_ms IS NULL
      AND s.state = 'active' AND s.expires_at_ms > obs.now_ms
      AND o.state = 'offered' AND o.expires_at_ms > obs.now_ms
      AND a.state = 'dispatching' AND a.callback_token_hash = @callback_hash::text
    FOR UPDATE OF a, o
),
lease AS (
    INSERT INTO control_core.run_leases (run_lease_id, run_id, attempt_id, worker_session_id,
                                         lease_version, state, granted_at_ms, expires_at_ms)
    SELECT gen_random_uuid(), cur.run_id, cur.attempt_id, cur.worker_session_id,
           cur.lease_version + 1, 'active', obs.now_ms, obs.now_ms + @lease_ttl_ms::bigint
    FROM cur, obs
    RETURNING run_lease_id, run_id, attempt_id, lease_version, expires_at_ms
),
off AS (
    UPDATE control_core.dispatch_offers o SET state = 'acked', answered_at_ms = obs.now_ms
    FROM cur, obs WHERE o.offer_id = cur.offer_id AND o.state = 'offered'
    RETURNING o.offer_id
),
att AS (
    UPDATE control_core.attempts a SET state = 'running', run_lease_id = lease.run_lease_id,
           started_at_ms = obs.now_ms, updated_at_ms = greatest(a.updated_at_ms, obs.now_ms)
    FROM lease, obs WHERE a.attempt_id = lease.attempt_id AND a.state = 'dispatching'
    RETURNING a.run_id
),
run AS (
    UPDATE control_core.runs r SET state = 'running', lease_version = lease.lease_version,
           updated_at_ms = greatest(r.updated_at_ms, obs.now_ms)
    FROM lease, obs WHERE r.run_id = lease.run_id AND r.state = 'dispatching'
    RETURNING r.run_id
),
ev AS (
    INSERT INTO control_core.run_events (event_id, run_id, seq, type, at_ms, detail)
    SELECT gen_random_uuid(), run.run_id,
           (SELECT coalesce(max(e.seq), 0) + 1 FROM control_core.run_events e WHERE e.run_id = run.run_id),
           'run.running', obs.now_ms,
           jsonb_build_object('attempt_no', cur.attempt_no, 'lease_version', lease.lease_version,
                              'worker', cur.worker_id, 'session_id', cur.worker_session_id)
    FROM run, cur, lease, obs
)
SELECT lease.lease_version::bigint AS lease_version, (lease.expires_at_ms - obs.now_ms)::bigint AS lease_expires_in_ms,
       -- the metrics' start latency: from when the Run was last queued and ready (admitted, or its
       -- retry's backoff end) to running, in database time; -1 when the Run carries no queue time
       coalesce(greatest(obs.now_ms - cur.ready_at_ms, 0), -1)::bigint AS waited_ms
FROM lease, obs, off, att, run, cur;

-- name: AckReplay :one
-- A′: the offer is already acked by this session with this callback token and its lease is
-- still active: the existing lease, nothing written.
SELECT l.lease_version::bigint AS lease_version,
       (l.expires_at_ms - control_core.db_now_ms())::bigint AS lease_expires_in_ms
FROM control_core.dispatch_offers o
JOIN control_core.attempts a ON a.attempt_id = o.attempt_id AND a.offer_id = o.offer_id
JOIN control_core.run_leases l ON l.run_lease_id = a.run_lease_id
JOIN control_core.worker_sessions s ON s.worker_session_id = o.worker_session_id
JOIN control_core.worker_tokens t ON t.worker_token_id = s.worker_token_id
WHERE o.offer_id = @offer_id::uuid AND o.state = 'acked' AND o.worker_session_id = @session_id::uuid
  AND t.token_hash = @token_hash::text AND t.revoked_at_ms IS NULL
  AND a.callback_token_hash = @callback_hash::text
  AND l.state = 'active' AND l.expires_at_ms > control_core.db_now_ms();

-- name: RequeueOffers :many
-- R (mode 'reject': T, S live, O, C), X (mode 'expire': offers past their expiry, up to
-- max_rows), W (mode 'withdraw': the listed offers) and the withdrawal of D (mode 'drain': the
-- session's offers). The offer ends (rejected or expired), the Attempt is claimed again with its
-- dispatch fields cleared, the Run is queued again; event run.queued with the reason. Runs are
-- locked SKIP LOCKED: the statement never waits, and an offer whose Run another transaction holds
-- is skipped. One row per offer it targeted (still offered in its snapshot): requeued, or busy
-- (not requeued because its Run, dispatching in the snapshot, was locked by another transaction;
-- a reject whose callback token does not match is neither): X leaves a busy offer to a later
-- sweep; the store tries W's, D's and R's busy offers again (Store.withdraw), so a busy Run does
-- not wait for X.
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms),
target AS (
    (SELECT o.offer_id FROM control_core.dispatch_offers o, obs
     WHERE @mode::text = 'expire' AND o.state = 'offered' AND o.expires_at_ms <= obs.now_ms
     ORDER BY o.expires_at_ms LIMIT @max_rows::integer)
  UNION ALL
    (SELECT o.offer_id FROM control_core.dispatch_offers o
     WHERE @mode::text = 'withdraw' AND o.offer_id = ANY (@offer_ids::uuid[]) AND o.state = 'offered')
  UNION ALL
    (SELECT o.offer_id FROM control_core.dispatch_offers o
     WHERE @mode::text = 'drain' AND o.worker_session_id = @session_id::uuid AND o.state = 'offered')
  UNION ALL
    (SELECT o.offer_id FROM control_core.dispatch_offers o
     JOIN control_core.worker_sessions s ON s.worker_session_id = o.worker_session_id
     JOIN control_core.worker_tokens t ON t.worker_token_id = s.worker_token_id
     CROSS JOIN obs
     WHERE @mode::text = 'reject' AND o.offer_id = ANY (@offer_ids::uuid[]) AND o.state = 'offered'
       AND o.expires_at_ms > obs.now_ms AND o.worker_session_id = @session_id::uuid
       AND t.token_hash = @token_hash::text AND t.revoked_at_ms IS NULL
       AND s.state IN ('active', 'draining') AND s.expires_at_ms > obs.now_ms)
),
run_lock AS (
    SELECT r.run_id FROM control_core.runs r
    WHERE r.run_id IN (SELECT a.run_id FROM target tg
                       JOIN control_core.dispatch_offers o ON o.offer_id = tg.offer_id
                       JOIN control_core.attempts a ON a.attempt_id = o.attempt_id)
      AND r.state = 'dispatching'
    FOR UPDATE SKIP LOCKED
),
cur AS (
    SELECT r.run_id, a.attempt_id, a.attempt_no, o.offer_id
    FROM run_lock r
    JOIN control_core.attempts a ON a.run_id = r.run_id AND a.state = 'dispatching'
    JOIN control_core.dispatch_offers o ON o.offer_id = a.offer_id AND o.state = 'offered'
    CROSS JOIN obs
    WHERE o.offer_id IN (SELECT offer_id FROM target)
      AND (@mode::text <> 'expire' OR o.expires_at_ms <= obs.now_ms)
      AND (@mode::text <> 'reject' OR (a.callback_token_hash = @callback_hash::text AND o.expires_at_ms > obs.now_ms))
    FOR UPDATE OF a, o
),
off AS (
    UPDATE control_core.dispatch_offers o
    SET state = CASE WHEN @mode::text = 'reject' THEN 'rejected' ELSE 'expired' END,
        answered_at_ms = CASE WHEN @mode::text = 'reject' THEN greatest(obs.now_ms, o.offered_at_ms) END
    FROM cur, obs WHERE o.offer_id = cur.offer_id AND o.state = 'offered'
    RETURNING o.offer_id
),
att AS (
    UPDATE control_core.attempts a
    SET state = 'claimed', worker_id = NULL, worker_session_id = NULL, offer_id = NULL,
        callback_token_hash = NULL, updated_at_ms = greatest(a.updated_at_ms, obs.now_ms)
    FROM cur, obs WHERE a.attempt_id = cur.attempt_id AND a.state = 'dispatching'
    RETURNING a.run_id
),
run AS (
    UPDATE control_core.runs r SET state = 'queued', updated_at_ms = greatest(r.updated_at_ms, obs.now_ms)
    FROM att, obs WHERE r.run_id = att.run_id AND r.state = 'dispatching'
    RETURNING r.run_id
),
ev AS (
    INSERT INTO control_core.run_events (event_id, run_id, seq, type, at_ms, detail)
    SELECT gen_random_uuid(), run.run_id,
           (SELECT coalesce(max(e.seq), 0) + 1 FROM control_core.run_events e WHERE e.run_id = run.run_id),
           'run.queued', obs.now_ms,
           jsonb_strip_nulls(jsonb_build_object(
               'reason', CASE @mode::text WHEN 'reject' THEN 'offer_rejected' WHEN 'expire' THEN 'offer_expired'
                                          ELSE 'offer_withdrawn' END,
               'offer_id', cur.offer_id, 'attempt_no', cur.attempt_no,
               'detail', CASE WHEN @mode::text = 'reject' THEN @detail::text END))
    FROM run JOIN cur ON cur.run_id = run.run_id, obs
)
SELECT tg.offer_id::uuid AS offer_id, (done.offer_id IS NOT NULL)::boolean AS requeued,
       (done.offer_id IS NULL AND r.state = 'dispatching'
        AND r.run_id NOT IN (SELECT run_id FROM run_lock))::boolean AS busy
FROM target tg
JOIN control_core.dispatch_offers o ON o.offer_id = tg.offer_id
JOIN control_core.attempts a ON a.attempt_id = o.attempt_id
JOIN control_core.runs r ON r.run_id = a.run_id
LEFT JOIN (SELECT cur.offer_id FROM cur JOIN run ON run.run_id = cur.run_id JOIN off ON off.offer_id = cur.offer_id) done
  ON done.offer_id = tg.offer_id;

-- name: Heartbeat :many
-- H: T, S active or draining and unexpired; the session's expiry moves, and each listed lease that
-- is active, held by S, of the listed version and NOT past its expiry is renewed (an expired
-- lease the sweep has not yet ended is never resurrected). Locks no Run (Lease → Session). One
-- row per listed lease, or one row with ord 0 for none; no row: the session fence failed, or the
-- list is longer than the session's capacity (nothing is renewed, not even the session).
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms),
sess AS (
    SELECT s.worker_session_id
    FROM control_core.worker_sessions s
    JOIN control_core.worker_tokens t ON t.worker_token_id = s.worker_token_id
    CROSS JOIN obs
    WHERE s.worker_session_id = @session_id::uuid AND t.token_hash = @token_hash::text AND t.revoked_at_ms IS NULL
      AND s.state IN ('active', 'draining') AND s.expires_at_ms > obs.now_ms
      AND cardinality(@attempt_ids::uuid[]) <= s.capacity   -- never more leases than it may hold
),
item AS (
    SELECT * FROM ROWS FROM (unnest(@attempt_ids::uuid[]), unnest(@lease_versions::bigint[])) WITH ORDINALITY AS i (attempt_id, lease_version, ord)
),
renewed AS (
    UPDATE control_core.run_leases l SET expires_at_ms = obs.now_ms + @lease_ttl_ms::bigint
    FROM item i, sess, obs
    WHERE l.attempt_id = i.attempt_id AND l.state = 'active' AND l.worker_session_id = sess.worker_session_id
      AND l.lease_version = i.lease_version AND l.expires_at_ms > obs.now_ms
    RETURNING l.attempt_id, l.run_id, l.expires_at_ms
),
touch AS (
    UPDATE control_core.worker_sessions s SET heartbeat_at_ms = obs.now_ms, expires_at_ms = obs.now_ms + @lease_ttl_ms::bigint
    FROM sess, obs
    WHERE s.worker_session_id = sess.worker_session_id AND s.state IN ('active', 'draining') AND s.expires_at_ms > obs.now_ms
      AND (SELECT count(*) FROM renewed) >= 0   -- after the leases: Lease → Session
    RETURNING s.expires_at_ms
)
SELECT coalesce(x.ord, 0)::bigint AS ord,
       coalesce(x.attempt_id, '00000000-0000-0000-0000-000000000000'::uuid)::uuid AS attempt_id,
       coalesce(x.renewed, false)::boolean AS renewed,
       coalesce(x.cancelled, false)::boolean AS cancelled,
       coalesce(x.lease_expires_in_ms, 0)::bigint AS lease_expires_in_ms,
       (touch.expires_at_ms - obs.now_ms)::bigint AS session_expires_in_ms
FROM touch CROSS JOIN obs
LEFT JOIN (
    SELECT i.ord, i.attempt_id, rn.attempt_id IS NOT NULL AS renewed, r.state = 'cancelled' AS cancelled,
           rn.expires_at_ms - obs.now_ms AS lease_expires_in_ms
    FROM item i CROSS JOIN obs
    LEFT JOIN renewed rn ON rn.attempt_id = i.attempt_id
    LEFT JOIN control_core.runs r ON r.run_id = rn.run_id
) x ON true
ORDER BY 1;

-- name: DueLeases :many
-- E's finder: active leases past their expiry, oldest first (run_leases_live_expiry_idx), only
-- those FinishAttempts can end (the Attempt running, its Run running or cancelled): a lease it would skip for ever must not fill
-- every batch ahead of the ones it can.
SELECT l.attempt_id::uuid AS attempt_id
FROM control_core.run_leases l
WHERE l.state = 'active' AND l.expires_at_ms <= control_core.db_now_ms()
  AND EXISTS (SELECT 1 FROM control_core.attempts a JOIN control_core.runs r ON r.run_id = a.run_id
              WHERE a.attempt_id = l.attempt_id AND a.state = 'running' AND a.run_lease_id = l.run_lease_id
                AND r.state IN ('running', 'cancelled'))
ORDER BY l.expires_at_ms
LIMIT @max_rows::integer;

-- name: FinishAttempts :many
-- F, F′, F″ and E in one statement; items as parallel arrays. A report's result is bounded by the
-- protocol (a tail of 8192 bytes); 65536 is only the backstop, above the worst escaping of a valid
-- one as jsonb text (every tail byte a control character, \u00XX: 6 × 8192), so no valid report
-- writes nothing while every fence holds (it was once 12288: a coloured log was never stored).
-- fence 'worker': C + L + S + T, the
-- lease row active (its time is not required: nothing was retried yet, see docs/dispatch.md);
-- fence 'expiry': the lease active and past its expiry. Runs are locked SKIP LOCKED (the sweep never
-- waits; a skipped worker item is retried by the store). The Attempt ends (succeeded, failed,
-- expired; cancelled on a cancelled Run), the lease ends (released; expired), and a running Run
-- succeeds, is queued for a retry (control_core.retry_at_ms: a new claimed Attempt attempt_no + 1)
-- or fails; a cancelled Run is never changed here. hand_backs: the Run's earlier Attempts that were
-- handed back (recorded outcome), which retry_at_ms does not count as attempts (pg-0023).
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms),
item AS (
    SELECT *
    FROM ROWS FROM (unnest(@attempt_ids::uuid[]), unnest(@fences::text[]), unnest(@session_ids::uuid[]),
                    unnest(@callback_hashes::text[]), unnest(@lease_versions::bigint[]), unnest(@outcomes::text[]),
                    unnest(@results::jsonb[]), unnest(@errors::jsonb[]))
         WITH ORDINALITY AS i (attempt_id, fence, session_id, callback_hash, lease_version, outcome, result, error, ord)
),
run_lock AS (
    SELECT r.run_id, r.state, r.project_id, r.task_id, r.task_revision FROM control_core.runs r
    WHERE r.run_id IN (SELECT a.run_id FROM item i JOIN control_core.attempts a ON a.attempt_id = i.attempt_id)
      AND r.state IN ('running', 'cancelled')
    FOR UPDATE SKIP LOCKED
),
cur AS (
    SELECT i.ord, i.fence, i.outcome, i.result, i.error, r.run_id, r.state AS run_state, a.attempt_id,
           a.attempt_no, a.started_at_ms, l.run_lease_id, kr.max_attempts, kr.retry_backoff_ms,
           (SELECT count(*) FROM control_core.attempts h
            WHERE h.run_id = a.run_id AND h.attempt_no < a.attempt_no
              AND h.result ->> 'outcome' = 'handed_back')::integer AS hand_backs
    FROM item i
    JOIN control_core.attempts a ON a.attempt_id = i.attempt_id AND a.state = 'running'
    JOIN run_lock r ON r.run_id = a.run_id
    JOIN control_core.run_leases l ON l.run_lease_id = a.run_lease_id AND l.state = 'active'
    JOIN control_core.task_revisions kr
      ON kr.project_id = r.project_id AND kr.task_id = r.task_id AND kr.revision = r.task_revision
    CROSS JOIN obs
    WHERE (i.fence = 'expiry' AND i.outcome = 'expired' AND l.expires_at_ms <= obs.now_ms)
       OR (i.fence = 'worker' AND i.outcome IN ('succeeded', 'failed', 'cancelled', 'handed_back')
           AND l.worker_session_id = i.session_id AND l.lease_version = i.lease_version
           AND a.callback_token_hash = i.callback_hash
           AND octet_length(i.result::text) <= 65536
           AND EXISTS (SELECT 1 FROM control_core.worker_sessions s
                       JOIN control_core.worker_tokens t ON t.worker_token_id = s.worker_token_id
                       WHERE s.worker_session_id = i.session_id AND s.state IN ('active', 'draining')
                         AND t.token_hash = @token_hash::text AND t.revoked_at_ms IS NULL))
    FOR UPDATE OF a, l
),
lease AS (
    UPDATE control_core.run_leases l
    SET state = CASE WHEN cur.fence = 'expiry' THEN 'expired' ELSE 'released' END,
        ended_at_ms = greatest(obs.now_ms, l.granted_at_ms)
    FROM cur, obs WHERE l.run_lease_id = cur.run_lease_id AND l.state = 'active'
    RETURNING l.run_lease_id
),
decided AS (
    SELECT cur.*,
           (CASE WHEN cur.fence = 'expiry' THEN 'expired'
                 WHEN cur.run_state = 'cancelled' THEN 'cancelled'
                 WHEN cur.outcome = 'succeeded' THEN 'succeeded'
                 ELSE 'failed' END)::text AS attempt_after,
           (CASE WHEN cur.run_state = 'running' AND NOT (cur.fence = 'worker' AND cur.outcome = 'succeeded')
                 THEN control_core.retry_at_ms(CASE WHEN cur.fence = 'expiry' THEN 'expired' ELSE cur.outcome END,
                                               cur.attempt_no, cur.hand_backs, cur.max_attempts, cur.retry_backoff_ms,
                                               obs.now_ms)
            END)::bigint AS retry_at
    FROM cur JOIN lease ON lease.run_lease_id = cur.run_lease_id, obs
),
att AS (
    UPDATE control_core.attempts a
    SET state = d.attempt_after, finished_at_ms = greatest(obs.now_ms, a.started_at_ms),
        result = nullif(d.result, 'null'::jsonb), error = nullif(d.error, 'null'::jsonb), updated_at_ms = greatest(a.updated_at_ms, obs.now_ms)
    FROM decided d, obs WHERE a.attempt_id = d.attempt_id AND a.state = 'running'
    RETURNING a.attempt_id
),
retry AS (
    INSERT INTO control_core.attempts (attempt_id, run_id, attempt_no, executor_kind, state, created_at_ms, updated_at_ms)
    SELECT gen_random_uuid(), d.run_id, d.attempt_no + 1, 'remote_worker', 'claimed', obs.now_ms, obs.now_ms
    FROM decided d JOIN att ON att.attempt_id = d.attempt_id, obs
    WHERE d.retry_at IS NOT NULL
    RETURNING run_id
),
run AS (
    UPDATE control_core.runs r
    SET state = CASE WHEN d.attempt_after = 'succeeded' THEN 'succeeded'
                     WHEN d.retry_at IS NOT NULL THEN 'queued' ELSE 'failed' END,
        retry_at_ms = coalesce(d.retry_at, r.retry_at_ms),
        finished_at_ms = CASE WHEN d.retry_at IS NULL THEN obs.now_ms END,
        updated_at_ms = greatest(r.updated_at_ms, obs.now_ms)
    FROM decided d JOIN att ON att.attempt_id = d.attempt_id, obs
    WHERE r.run_id = d.run_id AND r.state = 'running' AND d.run_state = 'running'
    RETURNING r.run_id, r.state
),
ev AS (
    INSERT INTO control_core.run_events (event_id, run_id, seq, type, at_ms, detail)
    SELECT gen_random_uuid(), run.run_id,
           (SELECT coalesce(max(e.seq), 0) + 1 FROM control_core.run_events e WHERE e.run_id = run.run_id),
           'run.' || run.state, obs.now_ms,
           CASE run.state
             WHEN 'succeeded' THEN jsonb_build_object('attempt_no', d.attempt_no, 'exit_code', d.result -> 'exit_code',
                                                      'duration_ms', d.result -> 'duration_ms')
             WHEN 'queued' THEN jsonb_build_object('reason', CASE WHEN d.fence = 'expiry' THEN 'lease_expired'
                                                                  WHEN d.outcome = 'handed_back' THEN 'handed_back'
                                                                  ELSE 'retry' END,
                                                   'failed_attempt_no', d.attempt_no, 'retry_at_ms', d.retry_at,
                                                   'error', jsonb_build_object('kind', d.error -> 'kind'))
             ELSE jsonb_build_object('reason', CASE WHEN d.fence = 'expiry' THEN 'lease_expired'
                                                    WHEN d.outcome = 'handed_back' THEN 'hand_backs_exhausted'
                                                    ELSE 'attempts_exhausted' END,
                                     'attempt_no', d.attempt_no, 'error', jsonb_build_object('kind', d.error -> 'kind'))
           END
    FROM run JOIN decided d ON d.run_id = run.run_id, obs
)
SELECT d.ord::bigint AS ord, d.attempt_id::uuid AS attempt_id, d.run_id::uuid AS run_id,
       coalesce(run.state, d.run_state)::text AS run_state_after, d.attempt_after::text AS attempt_state_after,
       greatest(obs.now_ms - coalesce(d.started_at_ms, obs.now_ms), 0)::bigint AS ran_ms -- lease grant to end, database time
FROM decided d JOIN att ON att.attempt_id = d.attempt_id
LEFT JOIN run ON run.run_id = d.run_id
CROSS JOIN obs
ORDER BY d.ord;

-- name: CompleteReplay :one
-- F‴: the Attempt already ended from this lease (released, same version, same session, same callback
-- token): its recorded outcome and the Run's state. The store answers replay when the outcome is
-- the same, lease_lost otherwise.
SELECT (a.result ->> 'outcome')::text AS outcome, r.state::text AS run_state, a.state::text AS attempt_state
FROM control_core.attempts a
JOIN control_core.run_leases l ON l.run_lease_id = a.run_lease_id
JOIN control_core.runs r ON r.run_id = a.run_id
JOIN control_core.worker_sessions s ON s.worker_session_id = l.worker_session_id
JOIN control_core.worker_tokens t ON t.worker_token_id = s.worker_token_id
WHERE a.attempt_id = @attempt_id::uuid AND a.state IN ('succeeded', 'failed', 'cancelled')
  AND l.state = 'released' AND l.lease_version = @lease_version::bigint AND l.worker_session_id = @session_id::uuid
  AND a.callback_token_hash = @callback_hash::text
  AND t.token_hash = @token_hash::text AND t.revoked_at_ms IS NULL;

-- name: DispatchDiagnosis :one
-- Read-only, only on a lost fence (like AdmitDiagnosis): what each fence of the caller sees now.
-- Every field is about rows the token may see: another token's session, offer or attempt reads as
-- absent ('').
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms),
tok AS (SELECT t.worker_token_id FROM control_core.worker_tokens t
        WHERE t.token_hash = @token_hash::text AND t.revoked_at_ms IS NULL),
sess AS (SELECT s.* FROM control_core.worker_sessions s
         WHERE s.worker_session_id = @session_id::uuid AND s.worker_token_id IN (SELECT worker_token_id FROM tok)),
offer AS (SELECT o.* FROM control_core.dispatch_offers o
          WHERE o.offer_id = @offer_id::uuid AND o.worker_session_id IN (SELECT worker_session_id FROM sess)),
att AS (SELECT a.* FROM control_core.attempts a
        WHERE (a.attempt_id = @attempt_id::uuid OR a.attempt_id IN (SELECT attempt_id FROM offer))
          AND a.worker_session_id IN (SELECT ts.worker_session_id FROM control_core.worker_sessions ts
                                      WHERE ts.worker_token_id IN (SELECT worker_token_id FROM tok)))
SELECT EXISTS (SELECT 1 FROM tok)::boolean AS token_ok,
       coalesce((SELECT state FROM sess), '')::text AS session_state,
       coalesce((SELECT expires_at_ms <= obs.now_ms FROM sess), false)::boolean AS session_expired,
       coalesce((SELECT state FROM offer), '')::text AS offer_state,
       coalesce((SELECT expires_at_ms <= obs.now_ms FROM offer), false)::boolean AS offer_expired,
       coalesce((SELECT state FROM att), '')::text AS attempt_state,
       coalesce((SELECT callback_token_hash = @callback_hash::text FROM att), false)::boolean AS callback_ok,
       coalesce((SELECT r.state FROM control_core.runs r WHERE r.run_id = (SELECT run_id FROM att)), '')::text AS run_state,
       coalesce((SELECT l.state FROM control_core.run_leases l WHERE l.run_lease_id = (SELECT run_lease_id FROM att)), '')::text AS lease_state,
       coalesce((SELECT l.lease_version FROM control_core.run_leases l WHERE l.run_lease_id = (SELECT run_lease_id FROM att)), 0)::bigint AS lease_version,
       coalesce((SELECT l.worker_session_id = @session_id::uuid FROM control_core.run_leases l
                 WHERE l.run_lease_id = (SELECT run_lease_id FROM att)), false)::boolean AS lease_ours
FROM obs;

-- name: DrainSession :one
-- D: T, S active → draining (no new offers from here on). Returns its active leases, and whether
-- it was draining already (prev locks the row first, so it reads the newest committed state).
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms),
prev AS (SELECT p.state FROM control_core.worker_sessions p WHERE p.worker_session_id = @session_id::uuid FOR NO KEY UPDATE)
UPDATE control_core.worker_sessions s SET state = 'draining'
FROM control_core.worker_tokens t, obs, prev
WHERE s.worker_session_id = @session_id::uuid AND t.worker_token_id = s.worker_token_id
  AND t.token_hash = @token_hash::text AND t.revoked_at_ms IS NULL
  AND s.state IN ('active', 'draining') AND s.expires_at_ms > obs.now_ms
RETURNING (SELECT count(*) FROM control_core.run_leases l
           WHERE l.worker_session_id = s.worker_session_id AND l.state = 'active')::bigint AS active_leases,
          (prev.state = 'draining')::boolean AS already_draining;

-- name: CloseSession :one
-- Q: T, S active or draining, no active lease → closed.
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms)
UPDATE control_core.worker_sessions s SET state = 'closed', closed_at_ms = obs.now_ms
FROM control_core.worker_tokens t, obs
WHERE s.worker_session_id = @session_id::uuid AND t.worker_token_id = s.worker_token_id
  AND t.token_hash = @token_hash::text AND t.revoked_at_ms IS NULL
  AND s.state IN ('active', 'draining')
  AND NOT EXISTS (SELECT 1 FROM control_core.run_leases l
                  WHERE l.worker_session_id = s.worker_session_id AND l.state = 'active')
RETURNING s.worker_session_id;

-- name: ExpireSessions :execrows
-- Z: live sessions past their expiry, up to max_rows, skipping locked ones. Their offers and
-- leases expire on their own clocks (X, E).
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms),
due AS (
    SELECT s.worker_session_id FROM control_core.worker_sessions s, obs
    WHERE s.state IN ('active', 'draining') AND s.expires_at_ms <= obs.now_ms
    ORDER BY s.expires_at_ms LIMIT @max_rows::integer
    FOR UPDATE OF s SKIP LOCKED
)
UPDATE control_core.worker_sessions s SET state = 'expired'
FROM due, obs
WHERE s.worker_session_id = due.worker_session_id AND s.state IN ('active', 'draining') AND s.expires_at_ms <= obs.now_ms;

-- name: LockSession :many
-- Taken before Offer in the same READ COMMITTED transaction: Offer's snapshot, taken after this
-- lock is granted, then counts the offers of every placement that held the lock before it. (Its
-- own FOR NO KEY UPDATE alone would not: EvalPlanQual re-checks the locked row, but the capacity
-- subqueries keep the statement's older snapshot, and two placements could both see a free slot.)
SELECT s.worker_session_id FROM control_core.worker_sessions s
WHERE s.worker_session_id = @session_id::uuid
FOR NO KEY UPDATE;
