-- Scheduler queries: run by the runtime role. Time is always the database's, observed once per
-- statement by control_core.db_now_ms() (ADR-0107).

-- name: ClaimDue :batchmany
-- The ADR-0105 claim, one statement committed on its own: the first row, in the order
-- next_fire_at_ms NULLS FIRST, project_id, trigger_id, of an active project and an enabled cron
-- trigger revision that is due or waiting for initialisation and carries no valid claim; locked
-- with SKIP LOCKED so replicas never wait on each other; stamped with the four-part fence and a
-- new state_version. coalesce(next_fire_at_ms, -1) is that order (cursors are never negative) and
-- lets trigger_schedules_claim_idx serve it as one range scan. RETURNING carries everything the
-- decision and the admit need, so the claim is the only read.
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms),
candidate AS (
    -- The project and trigger conditions are per-row subqueries, not joins, on purpose: the
    -- planner then has nothing to reorder and always walks the claim's index in order, stopping
    -- at the first claimable row. As joins, a large due fraction made it hash-join and sort the
    -- whole backlog (seconds at 1,000,000 rows) for a LIMIT 1.
    SELECT s.project_id, s.trigger_id, (s.claim_token IS NOT NULL) AS takeover -- takeover: an expired claim
    FROM control_core.trigger_schedules s
    WHERE coalesce(s.next_fire_at_ms, -1) <= control_core.db_now_ms()
      -- from_key: -1, the ADR's whole order; 0, past the uninitialised rows (-1), when this round
      -- already initialised its bound of them (docs/scheduling.md, Initialisation)
      AND coalesce(s.next_fire_at_ms, -1) >= @from_key::bigint
      AND control_core.schedule_claimable(
            (SELECT p.state FROM control_core.projects p WHERE p.project_id = s.project_id),
            (SELECT control_core.trigger_fires(tr.kind, tr.enabled) FROM control_core.trigger_revisions tr
             WHERE tr.project_id = s.project_id AND tr.trigger_id = s.trigger_id AND tr.revision = s.trigger_revision),
            s.claim_token, s.claim_expires_at_ms, control_core.db_now_ms())
    ORDER BY coalesce(s.next_fire_at_ms, -1), s.project_id, s.trigger_id
    FOR UPDATE OF s SKIP LOCKED
    LIMIT @max_rows::integer -- 1: the ADR's claim; more: batch admission (each row fenced alike)
)
UPDATE control_core.trigger_schedules s
SET claim_owner         = @owner::text,
    claim_token         = gen_random_uuid(),
    claim_version       = s.claim_version + 1,
    claim_expires_at_ms = greatest(obs.now_ms, s.updated_at_ms) + @lease_ms::bigint,
    state_version       = s.state_version + 1,
    updated_at_ms       = greatest(obs.now_ms, s.updated_at_ms)
FROM candidate, obs, control_core.projects p, control_core.trigger_revisions tr,
     control_core.task_revisions kr, control_core.execution_revisions er
WHERE s.project_id = candidate.project_id AND s.trigger_id = candidate.trigger_id
  AND p.project_id = s.project_id
  AND tr.project_id = s.project_id AND tr.trigger_id = s.trigger_id AND tr.revision = s.trigger_revision
  AND kr.project_id = tr.project_id AND kr.task_id = tr.task_id AND kr.revision = tr.task_revision
  AND er.execution_revision_id = kr.execution_revision_id
RETURNING s.project_id, s.trigger_id, s.trigger_revision, s.next_fire_at_ms, s.last_scheduled_at_ms,
          s.state_version, s.claim_owner, s.claim_token, s.claim_version, s.claim_expires_at_ms,
          s.updated_at_ms AS claimed_at_ms,
          p.revision AS project_revision, p.content_digest AS project_digest,
          tr.cron_spec, tr.timezone, tr.misfire_policy, tr.misfire_grace_ms, tr.content_digest AS trigger_digest,
          tr.task_id, tr.task_revision, kr.content_digest AS task_digest,
          er.execution_revision_id, er.digest AS execution_digest, candidate.takeover::boolean AS takeover,
          s.ctid::text AS row_ctid;

-- name: Admit :batchmany
-- The atomic admission of ADR-0105, for one claimed row or many, in ONE statement run alone in a
-- SERIALIZABLE transaction. The items arrive as parallel arrays, one element per row (one element:
-- the ADR's single admit). For every row on its own, the verified CTE re-locks the schedule row
-- and re-verifies, item by item: the full four-part fence against database time
-- (control_core.claim_fence_holds), the schedule's revision, state_version and cursor, the
-- decision's observation (the claim's claimed_at_ms: the updated_at_ms the claim wrote), candidate
-- (due at it, not before the cursor, due by the admit's own database time) and next fire time
-- (after the candidate), the project, trigger and task revisions and their content digests (as claimed and as
-- recomputed from the rows by the digest functions of the migrations), and the pinned
-- remote_worker execution revision's digest. Only the rows that pass are written: their queued
-- Runs (key control_core.cron_idempotency_key), claimed remote_worker Attempts and the events
-- run.created and run.queued inserted and their cursors advanced while clearing the claims, as
-- sets, with the occurrences each decision passed over added to the row's missed_total. A row that fails writes nothing and is simply absent from the result (ord is its 1-based
-- position in the arrays), so the caller diagnoses it on its own (AdmitDiagnosis).
--
-- The schedule row is addressed by the ctid the claim returned (and its key), not through the
-- primary key: under SERIALIZABLE a B-tree scan takes a predicate lock on the whole leaf page, so
-- concurrent admits of neighbouring triggers, each reading its leaf page and writing a new index
-- entry into it, form read/write cycles and abort each other. A TID scan locks only the tuple. If
-- the row changed since the claim, the tuple at that ctid is no longer visible: no row, a race.
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms),
item AS (
    SELECT *
    FROM ROWS FROM (unnest(@row_ctids::text[]),
                    unnest(@project_ids::text[]),
                    unnest(@trigger_ids::text[]),
                    unnest(@claim_owners::text[]),
                    unnest(@claim_tokens::uuid[]),
                    unnest(@claim_versions::bigint[]),
                    unnest(@trigger_revisions::bigint[]),
                    unnest(@state_versions::bigint[]),
                    unnest(@cursors_ms::bigint[]),
                    unnest(@scheduled_for_ms::bigint[]),
                    unnest(@next_fire_at_ms::bigint[]),
                    unnest(@claimed_at_ms::bigint[]),
                    unnest(@project_revisions::bigint[]),
                    unnest(@project_digests::text[]),
                    unnest(@trigger_digests::text[]),
                    unnest(@task_digests::text[]),
                    unnest(@execution_revision_ids::uuid[]),
                    unnest(@execution_digests::text[]),
                    unnest(@task_ids::text[]),
                    unnest(@task_revisions::bigint[]),
                    unnest(@run_ids::uuid[]),
                    unnest(@missed::bigint[]),
                    unnest(@last_missed_ms::bigint[]))
         WITH ORDINALITY AS i (row_ctid, project_id, trigger_id, claim_owner, claim_token, claim_version,
                               trigger_revision, state_version, cursor_ms, scheduled_for_ms, next_fire_at_ms,
                               claimed_at_ms, project_revision, project_digest, trigger_digest, task_digest,
                               execution_revision_id, execution_digest, task_id, task_revision, run_id,
                               missed, last_missed_ms, ord)
),
-- The project, task and execution revisions the items name are few (a batch of 128 triggers
-- usually names one of each): their rows are read, and their digests recomputed, once per
-- statement here, and every item is checked against them in verified. Read and recomputed once
-- per item, they were an eighth of a burst's admit (docs/performance.md, Bursts). A row whose
-- digest does not recompute is not in these sets, so no item that names it passes.
project AS MATERIALIZED (
    SELECT p.project_id, p.state, p.revision, p.content_digest
    FROM control_core.projects p
    WHERE p.project_id IN (SELECT project_id FROM item)
      AND p.content_digest = control_core.project_digest(p.project_id, p.state, p.revision)
),
execution AS MATERIALIZED (
    SELECT er.execution_revision_id, er.executor_kind, er.digest
    FROM control_core.execution_revisions er
    WHERE er.execution_revision_id IN (SELECT execution_revision_id FROM item)
      AND er.digest = control_core.execution_digest(er.spec)
),
task AS MATERIALIZED (
    SELECT kr.project_id, kr.task_id, kr.revision, kr.execution_revision_id, kr.content_digest
    FROM (SELECT DISTINCT project_id, task_id, task_revision FROM item) k
    JOIN control_core.task_revisions kr
      ON kr.project_id = k.project_id AND kr.task_id = k.task_id AND kr.revision = k.task_revision
    JOIN execution er ON er.execution_revision_id = kr.execution_revision_id
    WHERE kr.content_digest = control_core.task_digest(kr.task_id, kr.revision, er.execution_revision_id, er.digest,
                                                       kr.max_attempts, kr.retry_backoff_ms, kr.worker_selector)
),
verified AS (
    SELECT i.ord, i.row_ctid, i.run_id, gen_random_uuid() AS attempt_id, i.scheduled_for_ms, i.next_fire_at_ms,
           i.missed, i.last_missed_ms, s.project_id, s.trigger_id, s.trigger_revision, tr.task_id, tr.task_revision, kr.execution_revision_id
    FROM item i
    CROSS JOIN obs
    -- The row by its ctid alone (see above: a TID scan takes no index page predicate lock).
    -- OFFSET 0 keeps the planner from merging the subquery and reaching the row through the
    -- primary key instead, which it prefers once the key equalities below are joins.
    CROSS JOIN LATERAL (SELECT * FROM control_core.trigger_schedules x
                        WHERE x.ctid = CAST(i.row_ctid AS tid) OFFSET 0) s
    JOIN project p ON p.project_id = s.project_id
    JOIN control_core.triggers t ON t.project_id = s.project_id AND t.trigger_id = s.trigger_id
    JOIN control_core.trigger_revisions tr
      ON tr.project_id = s.project_id AND tr.trigger_id = s.trigger_id AND tr.revision = s.trigger_revision
    JOIN task kr ON kr.project_id = tr.project_id AND kr.task_id = tr.task_id AND kr.revision = tr.task_revision
    JOIN execution er ON er.execution_revision_id = kr.execution_revision_id
    WHERE s.project_id = i.project_id AND s.trigger_id = i.trigger_id
      -- the fence
      AND control_core.claim_fence_holds(s.claim_owner, s.claim_token, s.claim_version, s.claim_expires_at_ms,
                                         i.claim_owner, i.claim_token, i.claim_version, obs.now_ms)
      -- the schedule as claimed
      AND s.trigger_revision = i.trigger_revision AND s.state_version = i.state_version
      AND s.next_fire_at_ms = i.cursor_ms
      -- the decision, made at the claim's observation of database time: the claim's
      -- updated_at_ms, claimed_at_ms (ADR-0107). The candidate is due at that observation and
      -- not before the cursor, the next fire time lies after the candidate (it may be due too:
      -- an on-time occurrence within the misfire grace, which the next claim decides), and the
      -- candidate is due now.
      AND s.updated_at_ms = i.claimed_at_ms
      AND i.scheduled_for_ms >= s.next_fire_at_ms AND i.scheduled_for_ms <= i.claimed_at_ms
      AND i.next_fire_at_ms > i.scheduled_for_ms AND i.scheduled_for_ms <= obs.now_ms
      -- revisions and digests
      AND p.state = 'active' AND p.revision = i.project_revision AND p.content_digest = i.project_digest
      AND t.head_revision = s.trigger_revision
      AND tr.kind = 'cron' AND tr.enabled AND tr.content_digest = i.trigger_digest
      AND tr.content_digest = control_core.trigger_digest(tr.kind, tr.cron_spec, tr.timezone, tr.misfire_policy,
                                                          tr.misfire_grace_ms, tr.enabled, tr.task_id, tr.task_revision)
      AND tr.task_id = i.task_id AND tr.task_revision = i.task_revision
      AND kr.content_digest = i.task_digest
      AND er.execution_revision_id = i.execution_revision_id
      AND er.executor_kind = 'remote_worker' AND er.digest = i.execution_digest
    FOR UPDATE OF s
),
run AS (
    INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id, trigger_id,
                                   trigger_revision, scheduled_for_ms, idempotency_key, state, owner,
                                   queued_at_ms, created_at_ms, updated_at_ms)
    SELECT v.run_id, v.project_id, v.task_id, v.task_revision, v.execution_revision_id, v.trigger_id,
           v.trigger_revision, v.scheduled_for_ms,
           control_core.cron_idempotency_key(v.trigger_id, v.trigger_revision, v.scheduled_for_ms),
           'queued', 'runtime', obs.now_ms, obs.now_ms, obs.now_ms
    FROM verified v CROSS JOIN obs
),
-- Attempts and events come from verified, not from run's RETURNING: every verified row gets its
-- Run or the whole statement fails, and the foreign keys are checked at the statement's end.
attempt AS (
    INSERT INTO control_core.attempts (attempt_id, run_id, attempt_no, executor_kind, state, created_at_ms, updated_at_ms)
    SELECT v.attempt_id, v.run_id, 1, 'remote_worker', 'claimed', obs.now_ms, obs.now_ms
    FROM verified v CROSS JOIN obs
),
events AS (
    INSERT INTO control_core.run_events (event_id, run_id, seq, type, at_ms)
    SELECT gen_random_uuid(), v.run_id, e.seq, e.type, obs.now_ms
    FROM verified v CROSS JOIN obs CROSS JOIN (VALUES (1, 'run.created'), (2, 'run.queued')) AS e (seq, type)
)
UPDATE control_core.trigger_schedules s
SET next_fire_at_ms      = v.next_fire_at_ms,
    last_scheduled_at_ms = v.scheduled_for_ms,
    -- the occurrences the decision passed over (skip before an on-time Run, fire_once's catch-up
    -- but the one it fires), counted with the Run that ends them (pg-0024)
    missed_total         = s.missed_total + greatest(v.missed, 0),
    last_missed_for_ms   = CASE WHEN v.missed > 0 THEN greatest(s.last_missed_for_ms, v.last_missed_ms)
                                ELSE s.last_missed_for_ms END,
    state_version        = s.state_version + 1,
    claim_owner          = NULL,
    claim_token          = NULL,
    claim_expires_at_ms  = NULL,
    updated_at_ms        = greatest(s.updated_at_ms, obs.now_ms)
FROM verified v CROSS JOIN obs
WHERE s.ctid = CAST(v.row_ctid AS tid) AND s.project_id = v.project_id AND s.trigger_id = v.trigger_id
RETURNING v.ord::integer AS ord, v.run_id::uuid AS run_id, v.attempt_id::uuid AS attempt_id, obs.now_ms::bigint AS admitted_at_ms;

-- name: AdmitDiagnosis :one
-- Why an admit wrote nothing: the admit's verification in groups, by the same rule functions.
-- Read-only; run only on the failure path.
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms)
SELECT
    coalesce(control_core.claim_fence_holds(s.claim_owner, s.claim_token, s.claim_version, s.claim_expires_at_ms,
                                            @claim_owner::text, @claim_token::uuid, @claim_version::bigint, obs.now_ms),
             false)::boolean AS fence_holds,
    (s.trigger_revision = @trigger_revision::bigint AND s.state_version = @state_version::bigint
        AND s.next_fire_at_ms IS NOT DISTINCT FROM sqlc.narg(cursor_ms)::bigint)::boolean AS schedule_unchanged,
    coalesce(p.state = 'active' AND p.revision = @project_revision::bigint AND p.content_digest = @project_digest::text
        AND t.head_revision = s.trigger_revision AND tr.enabled AND tr.content_digest = @trigger_digest::text
        AND tr.task_id = @task_id::text AND tr.task_revision = @task_revision::bigint
        AND kr.content_digest = @task_digest::text AND er.digest = @execution_digest::text, false)::boolean AS revisions_unchanged,
    coalesce(p.content_digest = control_core.project_digest(p.project_id, p.state, p.revision)
        AND tr.content_digest = control_core.trigger_digest(tr.kind, tr.cron_spec, tr.timezone, tr.misfire_policy,
                                                            tr.misfire_grace_ms, tr.enabled, tr.task_id, tr.task_revision)
        AND kr.content_digest = control_core.task_digest(kr.task_id, kr.revision, er.execution_revision_id, er.digest,
                                                         kr.max_attempts, kr.retry_backoff_ms, kr.worker_selector)
        AND er.executor_kind = 'remote_worker'
        AND er.digest = control_core.execution_digest(er.spec), false)::boolean AS digests_valid,
    obs.now_ms
FROM control_core.trigger_schedules s
CROSS JOIN obs
LEFT JOIN control_core.projects p ON p.project_id = s.project_id
LEFT JOIN control_core.triggers t ON t.project_id = s.project_id AND t.trigger_id = s.trigger_id
LEFT JOIN control_core.trigger_revisions tr
  ON tr.project_id = s.project_id AND tr.trigger_id = s.trigger_id AND tr.revision = s.trigger_revision
LEFT JOIN control_core.task_revisions kr
  ON kr.project_id = tr.project_id AND kr.task_id = tr.task_id AND kr.revision = tr.task_revision
LEFT JOIN control_core.execution_revisions er ON er.execution_revision_id = kr.execution_revision_id
WHERE s.project_id = @project_id::text AND s.trigger_id = @trigger_id::text;

-- name: AdvanceClaimed :one
-- Init (first cursor), skip (advance only) and release (cursor unchanged) all end a claim the
-- same way: under the full fence, against database time, with a new state_version. No row back
-- means the fence was lost: a race, and nothing was written. A skip also counts the occurrences
-- its decision passed over (missed, 0 for init and release) into missed_total and records the
-- latest of them (last_missed_ms, read only when missed > 0) in last_missed_for_ms (pg-0024), in
-- the same statement: the count moves exactly when the cursor does.
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms)
UPDATE control_core.trigger_schedules s
SET next_fire_at_ms     = @next_fire_at_ms::bigint,
    missed_total        = s.missed_total + greatest(@missed::bigint, 0),
    last_missed_for_ms  = CASE WHEN @missed::bigint > 0 THEN greatest(s.last_missed_for_ms, @last_missed_ms::bigint)
                               ELSE s.last_missed_for_ms END,
    state_version       = s.state_version + 1,
    claim_owner         = NULL,
    claim_token         = NULL,
    claim_expires_at_ms = NULL,
    updated_at_ms       = greatest(s.updated_at_ms, obs.now_ms)
FROM obs
WHERE s.project_id = @project_id::text AND s.trigger_id = @trigger_id::text
  AND control_core.claim_fence_holds(s.claim_owner, s.claim_token, s.claim_version, s.claim_expires_at_ms,
                                     @claim_owner::text, @claim_token::uuid, @claim_version::bigint, obs.now_ms)
  AND s.trigger_revision = @trigger_revision::bigint AND s.state_version = @state_version::bigint
  AND s.next_fire_at_ms IS NOT DISTINCT FROM sqlc.narg(cursor_ms)::bigint
  AND (s.next_fire_at_ms IS NULL OR @next_fire_at_ms::bigint >= s.next_fire_at_ms)
RETURNING s.state_version;

-- name: ClaimInit :batchmany
-- The claim of rows waiting for initialisation (next_fire_at_ms NULL), many in one statement:
-- the head of ClaimDue's order, its -1 range, which is where the ADR's claim takes rows first.
-- Fenced, locked and filtered exactly like ClaimDue (the same claimable rule, the same joins, SKIP
-- LOCKED, database time, a fresh four-part fence and state_version per row), and it returns the
-- same columns, so a row it claims is a Claim like any other. The decision of such a row needs no
-- Run (it is init: the first cursor), so the coordinator decides the batch in Go and ends it with
-- InitClaimed, without spending the round's admission budget (docs/scheduling.md,
-- Initialisation).
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms),
candidate AS (
    -- per-row subqueries, not joins: see ClaimDue (the walk of the claim's index, in order)
    SELECT s.project_id, s.trigger_id, (s.claim_token IS NOT NULL) AS takeover -- takeover: an expired claim
    FROM control_core.trigger_schedules s
    -- below_key is 0 (cursors are never negative): the -1 range. A parameter, not a constant, on
    -- purpose: the store runs this under a generic plan, where a parameter's selectivity is the
    -- planner's default, so the plan walks the claim's index in order and stops at the LIMIT.
    -- With the constant the planner read the statistics (no row waiting, before ANALYZE saw a
    -- publish) and chose a bitmap scan and a sort of the whole range, every batch.
    WHERE coalesce(s.next_fire_at_ms, -1) < @below_key::bigint
      AND control_core.schedule_claimable(
            (SELECT p.state FROM control_core.projects p WHERE p.project_id = s.project_id),
            (SELECT control_core.trigger_fires(tr.kind, tr.enabled) FROM control_core.trigger_revisions tr
             WHERE tr.project_id = s.project_id AND tr.trigger_id = s.trigger_id AND tr.revision = s.trigger_revision),
            s.claim_token, s.claim_expires_at_ms, control_core.db_now_ms())
    ORDER BY coalesce(s.next_fire_at_ms, -1), s.project_id, s.trigger_id
    FOR UPDATE OF s SKIP LOCKED
    LIMIT @max_rows::integer
)
UPDATE control_core.trigger_schedules s
SET claim_owner         = @owner::text,
    claim_token         = gen_random_uuid(),
    claim_version       = s.claim_version + 1,
    claim_expires_at_ms = greatest(obs.now_ms, s.updated_at_ms) + @lease_ms::bigint,
    state_version       = s.state_version + 1,
    updated_at_ms       = greatest(obs.now_ms, s.updated_at_ms)
FROM candidate, obs, control_core.projects p, control_core.trigger_revisions tr,
     control_core.task_revisions kr, control_core.execution_revisions er
WHERE s.project_id = candidate.project_id AND s.trigger_id = candidate.trigger_id
  AND p.project_id = s.project_id
  AND tr.project_id = s.project_id AND tr.trigger_id = s.trigger_id AND tr.revision = s.trigger_revision
  AND kr.project_id = tr.project_id AND kr.task_id = tr.task_id AND kr.revision = tr.task_revision
  AND er.execution_revision_id = kr.execution_revision_id
RETURNING s.project_id, s.trigger_id, s.trigger_revision, s.next_fire_at_ms, s.last_scheduled_at_ms,
          s.state_version, s.claim_owner, s.claim_token, s.claim_version, s.claim_expires_at_ms,
          s.updated_at_ms AS claimed_at_ms,
          p.revision AS project_revision, p.content_digest AS project_digest,
          tr.cron_spec, tr.timezone, tr.misfire_policy, tr.misfire_grace_ms, tr.content_digest AS trigger_digest,
          tr.task_id, tr.task_revision, kr.content_digest AS task_digest,
          er.execution_revision_id, er.digest AS execution_digest, candidate.takeover::boolean AS takeover,
          s.ctid::text AS row_ctid;

-- name: InitClaimed :batchmany
-- Ends a batch of claimed uninitialised rows with their first cursors, in ONE statement: the
-- items arrive as parallel arrays (one element per row, like Admit), and each row is written only
-- under its own fence, exactly as AdvanceClaimed writes one: the full four-part fence against
-- database time, the schedule as claimed (revision, state_version, still uninitialised), and the
-- init decision itself (the first cursor after the claim's observation, claimed_at_ms, which is
-- still the row's updated_at_ms). A row whose fence was lost (another replica took it over after
-- expiry, a republish reset it) writes nothing and is absent from the result (ord: its 1-based
-- position in the arrays): a race.
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms),
item AS (
    SELECT *
    FROM ROWS FROM (unnest(@project_ids::text[]),
                    unnest(@trigger_ids::text[]),
                    unnest(@claim_owners::text[]),
                    unnest(@claim_tokens::uuid[]),
                    unnest(@claim_versions::bigint[]),
                    unnest(@trigger_revisions::bigint[]),
                    unnest(@state_versions::bigint[]),
                    unnest(@claimed_at_ms::bigint[]),
                    unnest(@next_fire_at_ms::bigint[]))
         WITH ORDINALITY AS i (project_id, trigger_id, claim_owner, claim_token, claim_version,
                               trigger_revision, state_version, claimed_at_ms, next_fire_at_ms, ord)
)
UPDATE control_core.trigger_schedules s
SET next_fire_at_ms     = i.next_fire_at_ms,
    state_version       = s.state_version + 1,
    claim_owner         = NULL,
    claim_token         = NULL,
    claim_expires_at_ms = NULL,
    updated_at_ms       = greatest(s.updated_at_ms, obs.now_ms)
FROM item i CROSS JOIN obs
WHERE s.project_id = i.project_id AND s.trigger_id = i.trigger_id
  -- the fence
  AND control_core.claim_fence_holds(s.claim_owner, s.claim_token, s.claim_version, s.claim_expires_at_ms,
                                     i.claim_owner, i.claim_token, i.claim_version, obs.now_ms)
  -- the schedule as claimed: same revision and state, still waiting for initialisation
  AND s.trigger_revision = i.trigger_revision AND s.state_version = i.state_version
  AND s.next_fire_at_ms IS NULL
  -- the init decision, made at the claim's observation: the first cursor lies after it
  AND s.updated_at_ms = i.claimed_at_ms AND i.next_fire_at_ms > i.claimed_at_ms
RETURNING i.ord::integer AS ord;

-- name: RecoveryCandidates :many
-- The startup recovery source: runtime-owned Runs still queued or dispatching, except the shapes
-- the dispatcher owns (pg-0022; docs/operations.md, Startup recovery): the Run queued, not
-- cancelled, queued_at_ms set, its newest Attempt claimed in the live shape (any attempt_no: a
-- retry waits in the queue like attempt 1), placed by the dispatcher; or the Run dispatching and
-- its newest Attempt dispatching in the live shape, whose offer a worker answers or a dispatcher's
-- sweep expires. A shape is control_core.attempt_live_shape: every dispatch field set or NULL as
-- the state says. Anything else (a drifted field, a queued Run with a cancel request or without
-- queued_at_ms, Run and Attempt in different states, no Attempt) is a candidate.
-- skip_run_ids: candidates this recovery already looked at and left alone (changed concurrently),
-- so a later read reaches the ones behind them.
-- The Runs looked at are the union of two partial indexes, so the cost follows the Runs out of
-- shape, never the admitted or executed history: runs_recovery_drift_idx (dispatching Runs, and
-- queued ones whose own row left the shape: bounded by the offers in flight) and
-- attempts_recovery_drift_idx (live Attempts out of every live shape). Their predicates are
-- repeated here word for word so the planner uses them; the WHERE below is the exact rule. A live
-- Run whose newest Attempt is terminal (in neither index) is refused at commit by pg-0022's
-- run_attempt_agree; a live Run with no Attempt by pg-0020's attempts_keep_live_run_attempt.
WITH drifted AS (
    SELECT d.run_id FROM control_core.runs d
    WHERE d.owner = 'runtime' AND (d.state = 'dispatching'
          OR (d.state = 'queued' AND (d.cancel_requested_at_ms IS NOT NULL OR d.queued_at_ms IS NULL)))
    UNION
    SELECT x.run_id FROM control_core.attempts x
    WHERE x.state IN ('claimed', 'dispatching', 'running')
      AND NOT ((x.state = 'claimed'
                AND x.worker_id IS NULL AND x.worker_session_id IS NULL AND x.offer_id IS NULL AND x.run_lease_id IS NULL
                AND x.callback_token_hash IS NULL AND x.started_at_ms IS NULL AND x.finished_at_ms IS NULL
                AND x.result IS NULL AND x.error IS NULL)
               OR (x.state = 'dispatching'
                AND x.worker_id IS NOT NULL AND x.worker_session_id IS NOT NULL AND x.offer_id IS NOT NULL AND x.run_lease_id IS NULL
                AND x.callback_token_hash IS NOT NULL AND x.started_at_ms IS NULL AND x.finished_at_ms IS NULL
                AND x.result IS NULL AND x.error IS NULL)
               OR (x.state = 'running'
                AND x.worker_id IS NOT NULL AND x.worker_session_id IS NOT NULL AND x.offer_id IS NOT NULL AND x.run_lease_id IS NOT NULL
                AND x.callback_token_hash IS NOT NULL AND x.started_at_ms IS NOT NULL AND x.finished_at_ms IS NULL
                AND x.result IS NULL AND x.error IS NULL))
)
SELECT r.run_id, r.state AS run_state, r.updated_at_ms AS run_updated_at_ms,
       a.attempt_id AS attempt_id, a.state AS attempt_state, a.updated_at_ms AS attempt_updated_at_ms
FROM drifted
JOIN control_core.runs r ON r.run_id = drifted.run_id
LEFT JOIN control_core.attempts a
  ON a.run_id = r.run_id
 AND a.attempt_no = (SELECT max(x.attempt_no) FROM control_core.attempts x WHERE x.run_id = r.run_id)
WHERE r.owner = 'runtime' AND r.state IN ('queued', 'dispatching')
  AND r.run_id <> ALL (coalesce(@skip_run_ids::uuid[], '{}'))
  AND NOT coalesce(
        (r.state = 'queued' AND r.cancel_requested_at_ms IS NULL AND r.queued_at_ms IS NOT NULL AND a.state = 'claimed'
         AND control_core.attempt_live_shape(a.state, a.worker_id, a.worker_session_id, a.offer_id, a.run_lease_id,
                                             a.callback_token_hash, a.started_at_ms, a.finished_at_ms, a.result, a.error))
        OR (r.state = 'dispatching' AND a.state = 'dispatching'
         AND control_core.attempt_live_shape(a.state, a.worker_id, a.worker_session_id, a.offer_id, a.run_lease_id,
                                             a.callback_token_hash, a.started_at_ms, a.finished_at_ms, a.result, a.error)), false)
ORDER BY r.queued_at_ms, r.run_id
LIMIT @max_rows::integer;

-- name: FailClosed :one
-- Fail one recovery candidate closed, fenced on the shape recovery observed (states and
-- updated_at_ms of both rows; run in a REPEATABLE READ transaction, so a concurrent change is a
-- serialization failure), so a change by the dispatcher wins and this writes nothing: the
-- newest Attempt (if any) and the Run become failed, nothing is re-dispatched or re-admitted, and
-- a run.recovery_failed event records what was found.
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms),
att AS (
    UPDATE control_core.attempts a
    SET state = 'failed', finished_at_ms = obs.now_ms, updated_at_ms = greatest(a.updated_at_ms, obs.now_ms),
        error = jsonb_build_object('reason', 'startup_recovery_failed_closed', 'observed_state', a.state)
    FROM obs
    WHERE a.attempt_id = sqlc.narg(attempt_id)::uuid AND a.run_id = @run_id::uuid
      AND a.state = sqlc.narg(attempt_state)::text AND a.updated_at_ms = sqlc.narg(attempt_updated_at_ms)::bigint
      AND EXISTS (SELECT 1 FROM control_core.runs r
                  WHERE r.run_id = @run_id::uuid AND r.owner = 'runtime'
                    AND r.state = @run_state::text AND r.updated_at_ms = @run_updated_at_ms::bigint)
    RETURNING a.attempt_id
),
run AS (
    UPDATE control_core.runs r
    SET state = 'failed', finished_at_ms = obs.now_ms, updated_at_ms = greatest(r.updated_at_ms, obs.now_ms)
    FROM obs
    WHERE r.run_id = @run_id::uuid AND r.owner = 'runtime'
      AND r.state = @run_state::text AND r.updated_at_ms = @run_updated_at_ms::bigint
      AND (sqlc.narg(attempt_id)::uuid IS NULL OR EXISTS (SELECT 1 FROM att))
    RETURNING r.run_id, obs.now_ms
),
event AS (
    INSERT INTO control_core.run_events (event_id, run_id, seq, type, at_ms, detail)
    SELECT gen_random_uuid(), run.run_id,
           (SELECT coalesce(max(e.seq), 0) + 1 FROM control_core.run_events e WHERE e.run_id = run.run_id),
           'run.recovery_failed', run.now_ms,
           jsonb_build_object('run_state', @run_state::text, 'attempt_id', sqlc.narg(attempt_id)::uuid,
                              'attempt_state', sqlc.narg(attempt_state)::text)
    FROM run
    RETURNING event_id
)
SELECT run.run_id, (SELECT count(*) FROM event)::bigint AS events FROM run;

-- name: NextDueIn :one
-- Milliseconds from now (database time) until the earliest unclaimed row of an active project
-- and an enabled cron trigger falls due (≤ 0: due now; the largest bigint: no such row): the
-- claim's filter and order without its due condition, so it walks the claim's index the same way
-- (per-row subqueries, see the claim) and stops at the first row. An idle coordinator sleeps
-- until then instead of waiting out its cadence.
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms)
SELECT coalesce((
    SELECT coalesce(s.next_fire_at_ms, -1) - obs.now_ms
    FROM control_core.trigger_schedules s
    WHERE control_core.schedule_claimable(
            (SELECT p.state FROM control_core.projects p WHERE p.project_id = s.project_id),
            (SELECT control_core.trigger_fires(tr.kind, tr.enabled) FROM control_core.trigger_revisions tr
             WHERE tr.project_id = s.project_id AND tr.trigger_id = s.trigger_id AND tr.revision = s.trigger_revision),
            s.claim_token, s.claim_expires_at_ms, obs.now_ms)
    ORDER BY coalesce(s.next_fire_at_ms, -1), s.project_id, s.trigger_id
    LIMIT 1
), 9223372036854775807)::bigint AS due_in_ms
FROM obs;
