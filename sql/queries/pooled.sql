-- The hot path of single mode behind a transaction-pooling pooler (pg-0027): the claim and the
-- admit of scheduler.sql (ClaimDue, Admit) called as the PL/pgSQL functions whose bodies they
-- are, so that the server plans each once per server session instead of at every execution
-- (PgBouncer 1.18 has no prepared statements in transaction pooling). Same parameters in the
-- same order, same columns of the same types: behind a transaction pooler the store sends these
-- texts in place of ClaimDue's and Admit's and reads their rows with ClaimDue's and Admit's
-- generated code (coordinator/store.go, pooledSQL). sqlc does not know a function's result
-- columns: the casts name their types for it (the function returns exactly these, so a cast
-- changes nothing, NULLs included), and their own generated row types are not used.

-- name: ClaimDuePooled :batchmany
-- ClaimDue, planned once per server session (control_core.claim_due, pg-0027).
SELECT c.project_id::text AS project_id, c.trigger_id::text AS trigger_id,
       c.trigger_revision::bigint AS trigger_revision,
       c.next_fire_at_ms::bigint AS next_fire_at_ms,
       c.last_scheduled_at_ms::bigint AS last_scheduled_at_ms,
       c.state_version::bigint AS state_version, c.claim_owner::text AS claim_owner,
       c.claim_token::uuid AS claim_token, c.claim_version::bigint AS claim_version,
       c.claim_expires_at_ms::bigint AS claim_expires_at_ms,
       c.claimed_at_ms::bigint AS claimed_at_ms, c.project_revision::bigint AS project_revision,
       c.project_digest::text AS project_digest, c.cron_spec::text AS cron_spec,
       c.timezone::text AS timezone, c.misfire_policy::text AS misfire_policy,
       c.misfire_grace_ms::bigint AS misfire_grace_ms, c.trigger_digest::text AS trigger_digest,
       c.task_id::text AS task_id, c.task_revision::bigint AS task_revision,
       c.task_digest::text AS task_digest, c.execution_revision_id::uuid AS execution_revision_id,
       c.execution_digest::text AS execution_digest, c.takeover::boolean AS takeover,
       c.row_ctid::text AS row_ctid
FROM control_core.claim_due(@owner::text, @lease_ms::bigint, @from_key::bigint, @max_rows::integer) AS c;

-- name: AdmitPooled :batchmany
-- Admit, planned once per server session (control_core.admit, pg-0027); run alone in a
-- SERIALIZABLE transaction, as Admit is.
SELECT a.ord::integer AS ord, a.run_id::uuid AS run_id, a.attempt_id::uuid AS attempt_id,
       a.admitted_at_ms::bigint AS admitted_at_ms
FROM control_core.admit(@row_ctids::text[], @project_ids::text[], @trigger_ids::text[], @claim_owners::text[],
                                 @claim_tokens::uuid[], @claim_versions::bigint[], @trigger_revisions::bigint[],
                                 @state_versions::bigint[], @cursors_ms::bigint[], @scheduled_for_ms::bigint[],
                                 @next_fire_at_ms::bigint[], @claimed_at_ms::bigint[], @project_revisions::bigint[],
                                 @project_digests::text[], @trigger_digests::text[], @task_digests::text[],
                                 @execution_revision_ids::uuid[], @execution_digests::text[], @task_ids::text[],
                                 @task_revisions::bigint[], @run_ids::uuid[], @missed::bigint[], @last_missed_ms::bigint[]) AS a;
