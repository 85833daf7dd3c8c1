-- Replica registration (pg-0024, issue 34): one row per replica owner in control_core.replicas,
-- in database time. The runtime role writes it only through the three SECURITY DEFINER
-- functions, one statement each (no session state, no advisory lock: PgBouncer transaction
-- pooling is fine); the admin role lists it.

-- name: RegisterReplica :one
-- Takes the owner's row when it is absent, expired or already this instance's; otherwise returns
-- the holder's row with registered = false and no instance_id (pg-0028: that id is what
-- replica_heartbeat and replica_release take, and a refused caller must not learn it), read here
-- as the nil UUID. now_ms is the database time of the decision.
SELECT r.registered::boolean AS registered,
       coalesce(r.instance_id, '00000000-0000-0000-0000-000000000000')::uuid AS instance_id,
       r.hostname::text AS hostname,
       r.version::text AS version, r.started_at_ms::bigint AS started_at_ms,
       r.heartbeat_at_ms::bigint AS heartbeat_at_ms, r.expires_at_ms::bigint AS expires_at_ms,
       r.now_ms::bigint AS now_ms
FROM control_core.replica_register(@owner::text, @instance_id::uuid, @hostname::text, @version::text, @ttl_ms::bigint) r;

-- name: HeartbeatReplica :one
-- Extends the row by ttl_ms from the database's now while it is this instance's; expires_at_ms is
-- 0 when the row is gone or another instance's (the function's NULL).
SELECT coalesce(control_core.replica_heartbeat(@owner::text, @instance_id::uuid, @ttl_ms::bigint), 0)::bigint AS expires_at_ms;

-- name: ReleaseReplica :one
-- Deletes the row if it is this instance's (a clean stop).
SELECT control_core.replica_release(@owner::text, @instance_id::uuid)::boolean AS released;

-- name: ListReplicas :many
-- Every registration by owner, with the database's now (live: expires_at_ms > now_ms). Admin role.
SELECT owner, instance_id, hostname, version, started_at_ms, heartbeat_at_ms, expires_at_ms,
       control_core.db_now_ms()::bigint AS now_ms
FROM control_core.replicas
ORDER BY owner;
