-- pg-0022-dispatch-loop (issue 32): the closed loop. Authenticated workers (worker_tokens, written by
-- the admin role, guarded and audited by the database), the dispatcher's tables made usable
-- (sessions hold their token, labels and protocol; leases their Run, at most one active per Run;
-- at most one live offer per Attempt), the placement queue index on runs, a task revision's retry
-- policy and worker selector (covered by a 7-argument task_digest equal to the 4-argument one for
-- the defaults, so no existing digest changes), the rule functions of the loop, a deferred trigger
-- that keeps a Run and its newest Attempt in agreement, the admin's audited cancel_run, and startup
-- recovery's attempts index narrowed to live Attempts out of the dispatcher's shapes.
-- Cost rule: no new constraint that scans runs, attempts or run_events (new columns there are
-- nullable or have a constant default); the index builds on runs and attempts do scan
-- (docs/operations.md, upgrade).
-- control-core capability v21 / dispatch_loop.

-- +goose Up

-- ---- the dispatcher's tables have never been written
-- No code wrote worker_sessions, run_leases or dispatch_offers before v21, so the NOT NULL columns
-- and CHECKs below hold on them trivially. Say so rather than guess if something did.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM control_core.worker_sessions) OR EXISTS (SELECT 1 FROM control_core.run_leases)
       OR EXISTS (SELECT 1 FROM control_core.dispatch_offers) THEN
        RAISE EXCEPTION 'pg-0022-dispatch-loop: worker_sessions/run_leases/dispatch_offers hold rows, but no control-core release before v21 writes them; find their writer before upgrading'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
END
$$;
-- +goose StatementEnd

-- ---- worker tokens
-- A worker authenticates with a bearer token (qlw_ + 32 random bytes); the database keeps only its
-- sha256 (256-bit random input: a plain hash, no KDF; looked up by hash). Several live tokens may
-- share a name (rotation: create the new one, roll the workers, revoke the old).
CREATE TABLE control_core.worker_tokens (
    worker_token_id uuid   PRIMARY KEY,
    name            text   NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    token_hash      text   NOT NULL UNIQUE CHECK (token_hash ~ '^[0-9a-f]{64}$'),
    created_at_ms   bigint NOT NULL CHECK (created_at_ms > 0),
    revoked_at_ms   bigint CHECK (revoked_at_ms >= created_at_ms)
);
CREATE INDEX worker_tokens_name_idx ON control_core.worker_tokens (name) WHERE revoked_at_ms IS NULL;

-- Times are the database's; an insert is live; the one update is a revocation, and it is forever:
-- identity and hash never change. No column defaults, so with the guard disabled an insert without
-- created_at_ms fails instead of trusting the caller.
-- +goose StatementBegin
CREATE FUNCTION control_core.worker_tokens_guard() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog
AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        NEW.created_at_ms := control_core.db_now_ms();
        NEW.revoked_at_ms := NULL;
        RETURN NEW;
    END IF;
    IF (NEW.worker_token_id, NEW.name, NEW.token_hash, NEW.created_at_ms)
       IS DISTINCT FROM (OLD.worker_token_id, OLD.name, OLD.token_hash, OLD.created_at_ms) THEN
        RAISE EXCEPTION 'worker_tokens: the identity, name and hash of worker token % cannot change', OLD.worker_token_id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF OLD.revoked_at_ms IS NOT NULL OR NEW.revoked_at_ms IS NULL THEN
        RAISE EXCEPTION 'worker_tokens: worker token % can only be revoked, once', OLD.worker_token_id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    NEW.revoked_at_ms := greatest(control_core.db_now_ms(), OLD.created_at_ms);
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER worker_tokens_guard BEFORE INSERT OR UPDATE ON control_core.worker_tokens
    FOR EACH ROW EXECUTE FUNCTION control_core.worker_tokens_guard();

-- worker_token.create / worker_token.revoke, written by the database (pg-0019); the hash never
-- enters the log.
-- +goose StatementBegin
CREATE FUNCTION control_core.audit_worker_tokens() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog
AS $$
DECLARE
    v_reason text := control_core.audit_reason();
    v_detail jsonb := jsonb_build_object('id', NEW.worker_token_id, 'name', NEW.name);
BEGIN
    IF v_reason <> '' THEN
        v_detail := v_detail || jsonb_build_object('reason', v_reason);
    END IF;
    PERFORM control_core.audit_write(CASE TG_OP WHEN 'INSERT' THEN 'worker_token.create' ELSE 'worker_token.revoke' END,
                                     NULL, NEW.name, v_detail);
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER audit_worker_tokens AFTER INSERT OR UPDATE ON control_core.worker_tokens
    FOR EACH ROW EXECUTE FUNCTION control_core.audit_worker_tokens();

-- The log is small (admin actions): re-validating its CHECKs is cheap. Token actions belong to no
-- project; run.cancel belongs to the Run's.
ALTER TABLE control_core.admin_audit_log
    DROP CONSTRAINT admin_audit_log_action_check,
    ADD CONSTRAINT admin_audit_log_action_check CHECK (action IN (
        'project.create', 'project.pause', 'project.resume', 'project.update', 'project.lock',
        'task.publish', 'task.head', 'execution.publish', 'trigger.publish', 'trigger.head',
        'plugin.package', 'plugin.publish', 'plugin.version', 'plugin.bind', 'plugin.unbind',
        'worker_token.create', 'worker_token.revoke', 'run.cancel')),
    DROP CONSTRAINT admin_audit_log_project_check,
    ADD CONSTRAINT admin_audit_log_project_check CHECK (
        project_id IS NOT NULL OR action IN ('plugin.package', 'plugin.publish', 'plugin.version',
                                             'worker_token.create', 'worker_token.revoke'));

-- ---- the dispatcher's tables (empty: asserted above)
ALTER TABLE control_core.worker_sessions
    ADD COLUMN worker_token_id uuid    NOT NULL REFERENCES control_core.worker_tokens (worker_token_id),
    ADD COLUMN labels          jsonb   NOT NULL DEFAULT '{}'
        CHECK (jsonb_typeof(labels) = 'object' AND octet_length(labels::text) <= 2048),
    ADD COLUMN protocol        integer NOT NULL CHECK (protocol = 1),
    ADD COLUMN closed_at_ms    bigint,
    ADD CONSTRAINT worker_sessions_capacity_bound CHECK (capacity BETWEEN 1 AND 256),
    ADD CONSTRAINT worker_sessions_closed_check CHECK ((state = 'closed') = (closed_at_ms IS NOT NULL));
-- the session sweep and workers list: live sessions by expiry
CREATE INDEX worker_sessions_live_expiry_idx ON control_core.worker_sessions (expires_at_ms)
    WHERE state IN ('active', 'draining');

ALTER TABLE control_core.run_leases
    ADD COLUMN run_id      uuid   NOT NULL REFERENCES control_core.runs (run_id),
    ADD COLUMN ended_at_ms bigint,
    ADD CONSTRAINT run_leases_ended_check CHECK ((state = 'active') = (ended_at_ms IS NULL)
                                                 AND (ended_at_ms IS NULL OR ended_at_ms >= granted_at_ms));
-- At most one active lease per Run: the loop's core guarantee is a database fact.
CREATE UNIQUE INDEX run_leases_live_run_idx     ON control_core.run_leases (run_id)            WHERE state = 'active';
-- the lease sweep; a session's capacity and heartbeat
CREATE INDEX        run_leases_live_expiry_idx  ON control_core.run_leases (expires_at_ms)     WHERE state = 'active';
CREATE INDEX        run_leases_live_session_idx ON control_core.run_leases (worker_session_id) WHERE state = 'active';

-- At most one live offer per Attempt; the offer sweep; a session's capacity and drain. The full
-- indexes of pg-0010/0011 stay: they back the foreign keys and "was this Attempt ever offered to
-- this session", bounded by the offers of one Attempt.
CREATE UNIQUE INDEX dispatch_offers_live_attempt_idx ON control_core.dispatch_offers (attempt_id)        WHERE state = 'offered';
CREATE INDEX        dispatch_offers_live_expiry_idx  ON control_core.dispatch_offers (expires_at_ms)     WHERE state = 'offered';
CREATE INDEX        dispatch_offers_live_session_idx ON control_core.dispatch_offers (worker_session_id) WHERE state = 'offered';

-- ---- runs: retry time, lease counter, the placement queue
-- Nullable / constant default: catalog-only, no rewrite and no scan. Bounds are the statements'.
ALTER TABLE control_core.runs
    ADD COLUMN retry_at_ms   bigint,
    ADD COLUMN lease_version bigint NOT NULL DEFAULT 0;
-- A project's queued Runs, ready first (the backoff end for a retry, else the scheduled time, else
-- the queue time); partial, so it holds the queue, never history. Placement's skip scan over
-- projects and its per-project range both need it: the non-partial runs_project_state_created_idx
-- would walk a project's finished history.
CREATE INDEX runs_dispatch_queue_idx ON control_core.runs
    (project_id, (coalesce(retry_at_ms, scheduled_for_ms, queued_at_ms)), run_id) WHERE state = 'queued';

-- ---- task revisions: retry policy and worker selector
-- Defaults are "run once, anywhere". The last CHECK normalises "no retries" to backoff 0, so an
-- unchanged task re-published after the upgrade keeps (1, 0, '{}') and its old digest.
ALTER TABLE control_core.task_revisions
    ADD COLUMN max_attempts     integer NOT NULL DEFAULT 1 CHECK (max_attempts BETWEEN 1 AND 100),
    ADD COLUMN retry_backoff_ms bigint  NOT NULL DEFAULT 0 CHECK (retry_backoff_ms BETWEEN 0 AND 86400000),
    ADD COLUMN worker_selector  jsonb   NOT NULL DEFAULT '{}'
        CHECK (jsonb_typeof(worker_selector) = 'object' AND octet_length(worker_selector::text) <= 2048),
    ADD CONSTRAINT task_revisions_backoff_needs_retries CHECK (max_attempts > 1 OR retry_backoff_ms = 0);

-- ---- rule functions (one expression each, inlinable: no SET clause, every name qualified)
-- A task revision's digest with its policy: for the defaults it is the 4-argument digest, so every
-- existing revision still verifies; any other policy is in the hashed content.
CREATE FUNCTION control_core.task_digest(task_id text, revision bigint, execution_revision_id uuid,
                                         execution_digest text, max_attempts integer, retry_backoff_ms bigint,
                                         worker_selector jsonb) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT CASE WHEN max_attempts OPERATOR(pg_catalog.=) 1 AND retry_backoff_ms OPERATOR(pg_catalog.=) 0
                       AND worker_selector OPERATOR(pg_catalog.=) '{}'::pg_catalog.jsonb
          THEN control_core.task_digest(task_id, revision, execution_revision_id, execution_digest)
          ELSE pg_catalog.encode(pg_catalog.sha256(pg_catalog.convert_to(pg_catalog.jsonb_build_object(
               'task_id', task_id, 'revision', revision,
               'execution_revision_id', execution_revision_id, 'execution_digest', execution_digest,
               'max_attempts', max_attempts, 'retry_backoff_ms', retry_backoff_ms,
               'worker_selector', worker_selector)::pg_catalog.text, 'UTF8')), 'hex') END $$;

-- When a finished Attempt's Run runs again: NULL for no retry (succeeded, cancelled, or the
-- attempts used up); at once for a hand-back (drain); else after backoff × 2^(attempt_no-1),
-- capped at 24 h (the shift is capped too: 2^30 × 1 ms already exceeds the cap).
CREATE FUNCTION control_core.retry_at_ms(outcome text, attempt_no integer, max_attempts integer,
                                         backoff_ms bigint, now_ms bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT CASE WHEN outcome OPERATOR(pg_catalog.=) 'succeeded' OR outcome OPERATOR(pg_catalog.=) 'cancelled'
                       OR attempt_no OPERATOR(pg_catalog.>=) max_attempts THEN NULL
                  WHEN outcome OPERATOR(pg_catalog.=) 'handed_back' THEN now_ms
                  ELSE now_ms OPERATOR(pg_catalog.+) LEAST(
                       backoff_ms OPERATOR(pg_catalog.*) (1::pg_catalog.int8 OPERATOR(pg_catalog.<<)
                           LEAST(GREATEST(attempt_no OPERATOR(pg_catalog.-) 1, 0), 30)),
                       86400000::pg_catalog.int8) END $$;

-- The three live shapes of an Attempt (design §1.1), field by field: claimed with every dispatch
-- field NULL; dispatching with worker, session, offer and callback set and nothing after; running
-- with those and its lease and start set, nothing after. Any other state is not live: false.
-- attempts_recovery_drift_idx writes the same predicate out (an index predicate is matched by text).
CREATE FUNCTION control_core.attempt_live_shape(state text, worker_id text, worker_session_id uuid, offer_id uuid,
                                                run_lease_id uuid, callback_token_hash text, started_at_ms bigint,
                                                finished_at_ms bigint, result jsonb, error jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT (state OPERATOR(pg_catalog.=) 'claimed'
              AND worker_id IS NULL AND worker_session_id IS NULL AND offer_id IS NULL AND run_lease_id IS NULL
              AND callback_token_hash IS NULL AND started_at_ms IS NULL AND finished_at_ms IS NULL
              AND result IS NULL AND error IS NULL)
          OR (state OPERATOR(pg_catalog.=) 'dispatching'
              AND worker_id IS NOT NULL AND worker_session_id IS NOT NULL AND offer_id IS NOT NULL AND run_lease_id IS NULL
              AND callback_token_hash IS NOT NULL AND started_at_ms IS NULL AND finished_at_ms IS NULL
              AND result IS NULL AND error IS NULL)
          OR (state OPERATOR(pg_catalog.=) 'running'
              AND worker_id IS NOT NULL AND worker_session_id IS NOT NULL AND offer_id IS NOT NULL AND run_lease_id IS NOT NULL
              AND callback_token_hash IS NOT NULL AND started_at_ms IS NOT NULL AND finished_at_ms IS NULL
              AND result IS NULL AND error IS NULL) $$;

-- A Run's state and its newest Attempt's: a cancelled Run may still have its Attempt running
-- (cancel pending) or expired by the lease sweep; a failed Run's Attempt failed or expired.
CREATE FUNCTION control_core.run_attempt_states_agree(run_state text, attempt_state text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT coalesce((run_state OPERATOR(pg_catalog.=) 'queued'      AND attempt_state OPERATOR(pg_catalog.=) 'claimed')
               OR (run_state OPERATOR(pg_catalog.=) 'dispatching' AND attempt_state OPERATOR(pg_catalog.=) 'dispatching')
               OR (run_state OPERATOR(pg_catalog.=) 'running'     AND attempt_state OPERATOR(pg_catalog.=) 'running')
               OR (run_state OPERATOR(pg_catalog.=) 'succeeded'   AND attempt_state OPERATOR(pg_catalog.=) 'succeeded')
               OR (run_state OPERATOR(pg_catalog.=) 'failed'
                   AND (attempt_state OPERATOR(pg_catalog.=) 'failed' OR attempt_state OPERATOR(pg_catalog.=) 'expired'))
               OR (run_state OPERATOR(pg_catalog.=) 'cancelled'
                   AND (attempt_state OPERATOR(pg_catalog.=) 'cancelled' OR attempt_state OPERATOR(pg_catalog.=) 'running'
                        OR attempt_state OPERATOR(pg_catalog.=) 'expired')), false) $$;

-- ---- I1: a Run and its newest Attempt agree, at commit
-- Deferred, so a transition may move the Run and the Attempt in any order within its transaction.
-- Not on INSERT: admission inserts a consistent pair in one statement and pays nothing; a retry
-- inserts its Attempt together with the Run's update, which fires this. A Run without an Attempt
-- passes (pg-0020/0021's triggers own that shape). It closes what the narrowed recovery index
-- below no longer sees: a live Run whose newest Attempt is terminal or of another state, or a Run
-- with an older Attempt still live.
-- +goose StatementBegin
CREATE FUNCTION control_core.run_attempt_agree() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog
AS $$
DECLARE
    v_run_state text;
    v_attempt   record;
BEGIN
    SELECT r.state INTO v_run_state FROM control_core.runs r WHERE r.run_id = NEW.run_id;
    SELECT a.attempt_id, a.attempt_no, a.state INTO v_attempt FROM control_core.attempts a
     WHERE a.run_id = NEW.run_id ORDER BY a.attempt_no DESC LIMIT 1;
    IF v_run_state IS NULL OR v_attempt.attempt_id IS NULL THEN
        RETURN NULL;
    END IF;
    IF NOT control_core.run_attempt_states_agree(v_run_state, v_attempt.state) THEN
        RAISE EXCEPTION 'runs: Run % is % but its newest Attempt % (attempt %) is %', NEW.run_id, v_run_state,
            v_attempt.attempt_id, v_attempt.attempt_no, v_attempt.state
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    IF EXISTS (SELECT 1 FROM control_core.attempts a
                WHERE a.run_id = NEW.run_id AND a.attempt_no < v_attempt.attempt_no
                  AND a.state IN ('claimed', 'dispatching', 'running')) THEN
        RAISE EXCEPTION 'runs: Run % has a live Attempt older than its newest (attempt %)', NEW.run_id, v_attempt.attempt_no
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE CONSTRAINT TRIGGER run_attempt_agree AFTER UPDATE OF state ON control_core.runs
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION control_core.run_attempt_agree();
CREATE CONSTRAINT TRIGGER run_attempt_agree AFTER UPDATE OF state ON control_core.attempts
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION control_core.run_attempt_agree();

-- ---- cancel: the admin's one way to change a Run
-- Locks the Run (then its newest Attempt, then the offer: the loop's lock order). Queued: the
-- Attempt is cancelled. Dispatching: its live offer expires (no answer time) and the Attempt is
-- cancelled. Running: Attempt and lease are left to the worker, told at its next heartbeat (or to
-- the lease sweep). The Run becomes cancelled with one run.cancelled event and one run.cancel audit
-- row. A terminal Run is returned unchanged (idempotent); an unknown one is no_data_found.
-- "by" is the client's control_core.audit_reason ("sql" when unset): detail, never identity.
-- +goose StatementBegin
CREATE FUNCTION control_core.cancel_run(p_run_id uuid, p_reason text)
RETURNS TABLE (from_state text, run_state text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog
AS $$
#variable_conflict use_column
DECLARE
    v_state   text;
    v_project text;
    v_attempt record;
    v_now     bigint := control_core.db_now_ms();
    v_reason  text := coalesce(p_reason, '');
    v_by      text := coalesce(nullif(control_core.audit_reason(), ''), 'sql');
BEGIN
    IF length(v_reason) > 256 THEN
        RAISE EXCEPTION 'cancel_run: a reason is at most 256 characters' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT r.state, r.project_id INTO v_state, v_project FROM control_core.runs r WHERE r.run_id = p_run_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'cancel_run: Run % does not exist', p_run_id USING ERRCODE = 'no_data_found';
    END IF;
    IF v_state NOT IN ('queued', 'dispatching', 'running') THEN
        RETURN QUERY SELECT v_state, v_state;
        RETURN;
    END IF;
    SELECT a.attempt_id, a.state, a.offer_id INTO v_attempt FROM control_core.attempts a
     WHERE a.run_id = p_run_id ORDER BY a.attempt_no DESC LIMIT 1 FOR UPDATE;
    IF v_state IN ('queued', 'dispatching') AND v_attempt.attempt_id IS NOT NULL
       AND v_attempt.state IN ('claimed', 'dispatching') THEN
        IF v_attempt.offer_id IS NOT NULL THEN
            UPDATE control_core.dispatch_offers o SET state = 'expired'
             WHERE o.offer_id = v_attempt.offer_id AND o.state = 'offered';
        END IF;
        UPDATE control_core.attempts a
           SET state = 'cancelled', finished_at_ms = v_now, updated_at_ms = greatest(a.updated_at_ms, v_now),
               error = jsonb_build_object('reason', 'run_cancelled')
         WHERE a.attempt_id = v_attempt.attempt_id;
    END IF;
    UPDATE control_core.runs r
       SET state = 'cancelled', cancel_requested_at_ms = v_now, finished_at_ms = v_now,
           updated_at_ms = greatest(r.updated_at_ms, v_now)
     WHERE r.run_id = p_run_id;
    INSERT INTO control_core.run_events (event_id, run_id, seq, type, at_ms, detail)
    VALUES (gen_random_uuid(), p_run_id,
            (SELECT coalesce(max(e.seq), 0) + 1 FROM control_core.run_events e WHERE e.run_id = p_run_id),
            'run.cancelled', v_now, jsonb_build_object('from', v_state, 'by', v_by, 'reason', v_reason));
    PERFORM control_core.audit_write('run.cancel', v_project, p_run_id::text,
                                     jsonb_build_object('from', v_state, 'by', v_by, 'reason', v_reason));
    RETURN QUERY SELECT v_state, 'cancelled'::text;
END
$$;
-- +goose StatementEnd

-- ---- startup recovery: the dispatcher's shapes are the dispatcher's
-- pg-0020's index held every Attempt but attempt 1 pristine, so each executed Attempt entered it
-- (its cost grew with history) and every retry or offer became a recovery candidate. Narrowed to
-- live Attempts out of the live shapes (attempt_live_shape written out): its size follows broken
-- rows. Same name, so drift checks and docs keep their object. RecoveryCandidates repeats the
-- predicate word for word.
DROP INDEX control_core.attempts_recovery_drift_idx;
CREATE INDEX attempts_recovery_drift_idx ON control_core.attempts (run_id)
    WHERE state IN ('claimed', 'dispatching', 'running')
      AND NOT ((state = 'claimed'
                AND worker_id IS NULL AND worker_session_id IS NULL AND offer_id IS NULL AND run_lease_id IS NULL
                AND callback_token_hash IS NULL AND started_at_ms IS NULL AND finished_at_ms IS NULL
                AND result IS NULL AND error IS NULL)
               OR (state = 'dispatching'
                AND worker_id IS NOT NULL AND worker_session_id IS NOT NULL AND offer_id IS NOT NULL AND run_lease_id IS NULL
                AND callback_token_hash IS NOT NULL AND started_at_ms IS NULL AND finished_at_ms IS NULL
                AND result IS NULL AND error IS NULL)
               OR (state = 'running'
                AND worker_id IS NOT NULL AND worker_session_id IS NOT NULL AND offer_id IS NOT NULL AND run_lease_id IS NOT NULL
                AND callback_token_hash IS NOT NULL AND started_at_ms IS NOT NULL AND finished_at_ms IS NULL
                AND result IS NULL AND error IS NULL));

-- ---- grants (roles/model.go v21 holds the same)
GRANT SELECT ON control_core.worker_tokens TO ql_runtime;
GRANT SELECT, INSERT, UPDATE ON control_core.worker_tokens TO ql_admin;
GRANT EXECUTE ON FUNCTION control_core.task_digest(text, bigint, uuid, text, integer, bigint, jsonb),
                          control_core.retry_at_ms(text, integer, integer, bigint, bigint),
                          control_core.attempt_live_shape(text, text, uuid, uuid, uuid, text, bigint, bigint, jsonb, jsonb),
                          control_core.run_attempt_states_agree(text, text)
    TO ql_admin, ql_runtime;
GRANT EXECUTE ON FUNCTION control_core.cancel_run(uuid, text) TO ql_admin;

SELECT control_core.advance_capability('control-core', 21, 'dispatch_loop', 'pg-0022-dispatch-loop');
