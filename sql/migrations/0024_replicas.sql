-- pg-0024-replicas (issue 34): one registration row per replica owner, so that two live replicas
-- never share an --owner (the claim fence names the owner: two replicas under one name would
-- renew each other's claims), and an operator can list who runs. The runtime role registers,
-- heartbeats and releases only through three functions, in database time, one statement each
-- (no session state: works behind PgBouncer in transaction pooling); the admin role reads the
-- table. Also two counters on trigger_schedules for missed occurrences (issue 34 item 2).
-- Cost: a new small table; two columns added with a constant default (no rewrite; the CHECK is
-- verified by one scan of trigger_schedules).
-- control-core capability v23 / replicas.

-- +goose Up

CREATE TABLE control_core.replicas (
    -- the replica's --owner, as trigger_schedules.claim_owner holds it
    owner           text   PRIMARY KEY CHECK (length(owner) BETWEEN 1 AND 128),
    -- random per process: a restart is a new instance
    instance_id     uuid   NOT NULL,
    hostname        text   NOT NULL CHECK (length(hostname) BETWEEN 1 AND 255),
    version         text   NOT NULL CHECK (length(version) BETWEEN 1 AND 128),
    -- database time (control_core.db_now_ms())
    started_at_ms   bigint NOT NULL CHECK (started_at_ms > 0),
    heartbeat_at_ms bigint NOT NULL,
    expires_at_ms   bigint NOT NULL,
    CONSTRAINT replicas_heartbeat_check CHECK (heartbeat_at_ms >= started_at_ms),
    CONSTRAINT replicas_expiry_check CHECK (expires_at_ms > heartbeat_at_ms)
);

-- Takes owner's row for instance when it is absent, expired (database time), or already this
-- instance's; otherwise leaves it. Returns whether it was taken and the row as it now stands
-- (the holder's, when refused), with the database time of the decision. ttl_ms: 1 s to 1 h.
-- +goose StatementBegin
CREATE FUNCTION control_core.replica_register(p_owner text, p_instance_id uuid, p_hostname text, p_version text,
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
    -- refused: the conflicting row is locked by this statement's ON CONFLICT and still there
    RETURN QUERY SELECT false, r.instance_id, r.hostname, r.version, r.started_at_ms, r.heartbeat_at_ms,
                        r.expires_at_ms, v_now
                   FROM control_core.replicas r WHERE r.owner = p_owner;
END
$$;
-- +goose StatementEnd

-- Extends owner's row by ttl_ms from now while it is instance's (also after its expiry, as long
-- as nobody took it). Returns the new expiry, or NULL when the row is no longer instance's.
-- +goose StatementBegin
CREATE FUNCTION control_core.replica_heartbeat(p_owner text, p_instance_id uuid, p_ttl_ms bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog
AS $$
DECLARE
    v_now     bigint := control_core.db_now_ms();
    v_expires bigint;
BEGIN
    IF p_ttl_ms IS NULL OR p_ttl_ms < 1000 OR p_ttl_ms > 3600000 THEN
        RAISE EXCEPTION 'replica_heartbeat: ttl_ms % is outside 1000..3600000', p_ttl_ms USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE control_core.replicas r
       SET heartbeat_at_ms = GREATEST(v_now, r.started_at_ms), expires_at_ms = GREATEST(v_now, r.started_at_ms) + p_ttl_ms
     WHERE r.owner = p_owner AND r.instance_id = p_instance_id
    RETURNING r.expires_at_ms INTO v_expires;
    RETURN v_expires;
END
$$;
-- +goose StatementEnd

-- Deletes owner's row if it is instance's (a clean stop). Returns whether it did.
-- +goose StatementBegin
CREATE FUNCTION control_core.replica_release(p_owner text, p_instance_id uuid)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog
AS $$
BEGIN
    DELETE FROM control_core.replicas r WHERE r.owner = p_owner AND r.instance_id = p_instance_id;
    RETURN FOUND;
END
$$;
-- +goose StatementEnd

-- ---- missed occurrences (issue 34 item 2): how many occurrences a schedule skipped in all, and
-- the occurrence time of the last skip (NULL: never). The runtime role's UPDATE on the table
-- (pg-0017) covers them.
ALTER TABLE control_core.trigger_schedules
    ADD COLUMN missed_total bigint NOT NULL DEFAULT 0 CONSTRAINT trigger_schedules_missed_total_check CHECK (missed_total >= 0),
    ADD COLUMN last_missed_for_ms bigint;

-- ---- grants (roles/model.go v23 holds the same)
GRANT SELECT ON control_core.replicas TO ql_admin;
GRANT EXECUTE ON FUNCTION control_core.replica_register(text, uuid, text, text, bigint),
                          control_core.replica_heartbeat(text, uuid, bigint),
                          control_core.replica_release(text, uuid)
    TO ql_runtime;

SELECT control_core.advance_capability('control-core', 23, 'replicas', 'pg-0024-replicas');
