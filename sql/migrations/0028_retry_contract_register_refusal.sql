-- pg-0028-retry-contract-register-refusal: the contract step pg-0023 promised (expand, then
-- contract), and a refused replica_register no longer hands out the holder's instance id.
--
-- ---- the contract step
-- pg-0023 added the 6-argument retry_at_ms (a hand-back is not an attempt) and, in its final text,
-- kept pg-0022's 5-argument form for v21 dispatchers still serving during a rolling upgrade. No
-- dispatcher since v22 calls it (sql/queries call only the 6-argument form), so it goes now.
-- The stop-43 release (f1634fb) applied pg-0023's first text, which dropped the 5-argument form
-- already: IF EXISTS makes this one statement hold on both histories, which end in one schema.
--
-- ---- the register refusal
-- pg-0024's replica_register answered a refused caller with the holder's row, instance_id
-- included. The instance id is the credential replica_heartbeat and replica_release take, and
-- the runtime role may call the function directly, so any runtime client could learn a live
-- replica's id by registering under its owner, then release (evict) it. The body is pg-0024's
-- except the refused branch, which returns NULL for instance_id; the signature, SECURITY
-- DEFINER, owner and grants stay (CREATE OR REPLACE keeps them).
-- control-core capability v27 / retry_contract_register_refusal.

-- +goose Up

DROP FUNCTION IF EXISTS control_core.retry_at_ms(text, integer, integer, bigint, bigint);

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION control_core.replica_register(p_owner text, p_instance_id uuid, p_hostname text, p_version text,
                                                         p_ttl_ms bigint)
RETURNS TABLE (registered boolean, instance_id uuid, hostname text, version text, started_at_ms bigint,
               heartbeat_at_ms bigint, expires_at_ms bigint, now_ms bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog
AS $$
#variable_conflict use_column
DECLARE
    v_now bigint := control_core.db_now_ms();
    v_row control_core.replicas%ROWTYPE;
BEGIN
    IF p_ttl_ms IS NULL OR p_ttl_ms < 1000 OR p_ttl_ms > 3600000 THEN
        RAISE EXCEPTION 'replica_register: ttl_ms % is outside 1000..3600000', p_ttl_ms USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_instance_id IS NULL THEN
        RAISE EXCEPTION 'replica_register: instance_id is required' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO control_core.replicas AS r (owner, instance_id, hostname, version, started_at_ms, heartbeat_at_ms, expires_at_ms)
    VALUES (p_owner, p_instance_id, p_hostname, p_version, v_now, v_now, v_now + p_ttl_ms)
    ON CONFLICT (owner) DO UPDATE
       SET instance_id     = EXCLUDED.instance_id,
           hostname        = EXCLUDED.hostname,
           version         = EXCLUDED.version,
           started_at_ms   = CASE WHEN r.instance_id = EXCLUDED.instance_id THEN r.started_at_ms ELSE EXCLUDED.started_at_ms END,
           heartbeat_at_ms = EXCLUDED.heartbeat_at_ms,
           expires_at_ms   = EXCLUDED.expires_at_ms
     WHERE r.instance_id = EXCLUDED.instance_id OR r.expires_at_ms <= v_now
    RETURNING r.* INTO v_row;
    IF FOUND THEN
        RETURN QUERY SELECT true, v_row.instance_id, v_row.hostname, v_row.version, v_row.started_at_ms,
                            v_row.heartbeat_at_ms, v_row.expires_at_ms, v_now;
        RETURN;
    END IF;
    -- refused: the conflicting row is locked by this statement's ON CONFLICT and still there.
    -- Its instance_id is what replica_heartbeat and replica_release take, so the refused caller
    -- gets NULL, never it.
    RETURN QUERY SELECT false, NULL::uuid, r.hostname, r.version, r.started_at_ms, r.heartbeat_at_ms,
                        r.expires_at_ms, v_now
                   FROM control_core.replicas r WHERE r.owner = p_owner;
END
$$;
-- +goose StatementEnd

SELECT control_core.advance_capability('control-core', 27, 'retry_contract_register_refusal', 'pg-0028-retry-contract-register-refusal');
