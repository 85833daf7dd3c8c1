-- pg-0027-pooled-hot-path (issue 35 point 2): the ADR-0105 claim and admit of single mode as two
-- PL/pgSQL functions, for a runtime behind a transaction-pooling PgBouncer (1.18 and before: no
-- prepared statements in transaction pooling). There every claim and every admit used to reach
-- the server as the unnamed statement, parsed and planned again at each execution: a third of
-- direct's admissions in single mode (docs/performance.md, "Through PgBouncer"). A PL/pgSQL
-- function's statement is planned once per server session and its plan kept across
-- transactions, which PgBouncer hands from client to client; the statement sent is then a bare
-- function call.
--
-- The bodies are the claim's and the admit's statements of sql/queries/scheduler.sql as sqlc
-- generates them (db/batch.go, ClaimDue and Admit), character for character, the parameters
-- the function's positional ones ($1 …); TestPooledFunctionsAreTheGeneratedStatements holds the
-- two texts together. SECURITY INVOKER: the caller's privileges are the direct statements' own,
-- so the runtime role gets only EXECUTE. The store calls them only behind a transaction pooler
-- (dbconn.DB.Pooled and not ql_pooler=session); a direct or session-pooled runtime sends the
-- statements as they are. Cost: two functions, nothing on any table.
-- control-core capability v26 / pooled_hot_path.

-- +goose Up

-- The claim (ClaimDue): $1 owner, $2 lease_ms, $3 from_key, $4 max_rows.
-- +goose StatementBegin
CREATE FUNCTION control_core.claim_due(text, bigint, bigint, integer)
RETURNS TABLE (project_id text, trigger_id text, trigger_revision bigint, next_fire_at_ms bigint,
               last_scheduled_at_ms bigint, state_version bigint, claim_owner text, claim_token uuid,
               claim_version bigint, claim_expires_at_ms bigint, claimed_at_ms bigint,
               project_revision bigint, project_digest text, cron_spec text, timezone text,
               misfire_policy text, misfire_grace_ms bigint, trigger_digest text, task_id text,
               task_revision bigint, task_digest text, execution_revision_id uuid,
               execution_digest text, takeover boolean, row_ctid text)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog
AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
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
      AND coalesce(s.next_fire_at_ms, -1) >= $3::bigint
      AND control_core.schedule_claimable(
            (SELECT p.state FROM control_core.projects p WHERE p.project_id = s.project_id),
            (SELECT control_core.trigger_fires(tr.kind, tr.enabled) FROM control_core.trigger_revisions tr
             WHERE tr.project_id = s.project_id AND tr.trigger_id = s.trigger_id AND tr.revision = s.trigger_revision),
            s.claim_token, s.claim_expires_at_ms, control_core.db_now_ms())
    ORDER BY coalesce(s.next_fire_at_ms, -1), s.project_id, s.trigger_id
    FOR UPDATE OF s SKIP LOCKED
    LIMIT $4::integer -- 1: the ADR's claim; more: batch admission (each row fenced alike)
)
UPDATE control_core.trigger_schedules s
SET claim_owner         = $1::text,
    claim_token         = gen_random_uuid(),
    claim_version       = s.claim_version + 1,
    claim_expires_at_ms = greatest(obs.now_ms, s.updated_at_ms) + $2::bigint,
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
          s.ctid::text AS row_ctid
;
END
$$;
-- +goose StatementEnd

-- The admit (Admit): $1 … $23 the item arrays, in the order of db.AdmitParams.
-- +goose StatementBegin
CREATE FUNCTION control_core.admit(text[], text[], text[], text[], uuid[], bigint[], bigint[], bigint[],
                                   bigint[], bigint[], bigint[], bigint[], bigint[], text[], text[],
                                   text[], uuid[], text[], text[], bigint[], uuid[], bigint[], bigint[])
RETURNS TABLE (ord integer, run_id uuid, attempt_id uuid, admitted_at_ms bigint)
LANGUAGE plpgsql VOLATILE SECURITY INVOKER
SET search_path = pg_catalog
AS $$
#variable_conflict use_column
BEGIN
RETURN QUERY
WITH obs AS (SELECT control_core.db_now_ms() AS now_ms),
item AS (
    SELECT row_ctid, project_id, trigger_id, claim_owner, claim_token, claim_version, trigger_revision, state_version, cursor_ms, scheduled_for_ms, next_fire_at_ms, claimed_at_ms, project_revision, project_digest, trigger_digest, task_digest, execution_revision_id, execution_digest, task_id, task_revision, run_id, missed, last_missed_ms, ord
    FROM ROWS FROM (unnest($1::text[]),
                    unnest($2::text[]),
                    unnest($3::text[]),
                    unnest($4::text[]),
                    unnest($5::uuid[]),
                    unnest($6::bigint[]),
                    unnest($7::bigint[]),
                    unnest($8::bigint[]),
                    unnest($9::bigint[]),
                    unnest($10::bigint[]),
                    unnest($11::bigint[]),
                    unnest($12::bigint[]),
                    unnest($13::bigint[]),
                    unnest($14::text[]),
                    unnest($15::text[]),
                    unnest($16::text[]),
                    unnest($17::uuid[]),
                    unnest($18::text[]),
                    unnest($19::text[]),
                    unnest($20::bigint[]),
                    unnest($21::uuid[]),
                    unnest($22::bigint[]),
                    unnest($23::bigint[]))
         WITH ORDINALITY AS i (row_ctid, project_id, trigger_id, claim_owner, claim_token, claim_version,
                               trigger_revision, state_version, cursor_ms, scheduled_for_ms, next_fire_at_ms,
                               claimed_at_ms, project_revision, project_digest, trigger_digest, task_digest,
                               execution_revision_id, execution_digest, task_id, task_revision, run_id,
                               missed, last_missed_ms, ord)
),
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
    CROSS JOIN LATERAL (SELECT project_id, trigger_id, trigger_revision, next_fire_at_ms, last_scheduled_at_ms, state_version, claim_owner, claim_token, claim_version, claim_expires_at_ms, updated_at_ms, missed_total, last_missed_for_ms FROM control_core.trigger_schedules x
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
RETURNING v.ord::integer AS ord, v.run_id::uuid AS run_id, v.attempt_id::uuid AS attempt_id, obs.now_ms::bigint AS admitted_at_ms
;
END
$$;
-- +goose StatementEnd

-- ---- grants (roles/model.go v26 holds the same)
GRANT EXECUTE ON FUNCTION control_core.claim_due(text, bigint, bigint, integer),
                          control_core.admit(text[], text[], text[], text[], uuid[], bigint[], bigint[], bigint[],
                                             bigint[], bigint[], bigint[], bigint[], bigint[], text[], text[],
                                             text[], uuid[], text[], text[], bigint[], uuid[], bigint[], bigint[])
    TO ql_runtime;

SELECT control_core.advance_capability('control-core', 26, 'pooled_hot_path', 'pg-0027-pooled-hot-path');
