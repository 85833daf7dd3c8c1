package drifttest

// replicas: what pg-0024 (and pg-0028's register refusal) holds as database facts for replica registration (issue 34): one row per
// owner (the primary key the register function's ON CONFLICT relies on), the three functions the
// runtime role writes the table through, the runtime role's lack of any table privilege on it,
// and the missed-occurrence counter's check. Each change would let two live replicas share an
// --owner (and renew each other's claims) or let a replica write another's registration.
var replicas = []Case{
	{Name: "the one-row-per-owner key dropped",
		SQL: `ALTER TABLE control_core.replicas DROP CONSTRAINT replicas_pkey`, Object: "replicas_pkey", Runtime: true},
	{Name: "the replica heartbeat replaced by one that always extends",
		SQL: `CREATE OR REPLACE FUNCTION control_core.replica_heartbeat(p_owner text, p_instance_id uuid, p_ttl_ms bigint)
		      RETURNS bigint LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog
		      AS $$ SELECT control_core.db_now_ms() OPERATOR(pg_catalog.+) p_ttl_ms $$`,
		Object: "control_core.replica_heartbeat(text, uuid, bigint)", Runtime: true},
	// pg-0028: a refused register answers without the holder's instance id, the credential
	// replica_heartbeat and replica_release take
	{Name: "the replica register replaced by one that tells a refused caller the holder's instance id",
		SQL: `CREATE OR REPLACE FUNCTION control_core.replica_register(p_owner text, p_instance_id uuid, p_hostname text,
		                                                          p_version text, p_ttl_ms bigint)
		      RETURNS TABLE (registered boolean, instance_id uuid, hostname text, version text, started_at_ms bigint,
		                     heartbeat_at_ms bigint, expires_at_ms bigint, now_ms bigint)
		      LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog
		      AS $$ SELECT false, r.instance_id, r.hostname, r.version, r.started_at_ms, r.heartbeat_at_ms,
		                   r.expires_at_ms, control_core.db_now_ms()
		              FROM control_core.replicas r WHERE r.owner OPERATOR(pg_catalog.=) p_owner $$`,
		Object: "control_core.replica_register(text, uuid, text, text, bigint)", Runtime: true},
	{Name: "UPDATE on replicas for the runtime role",
		SQL: `GRANT UPDATE ON control_core.replicas TO {runtime}`, Object: "control_core.replicas", Runtime: true},
	{Name: "EXECUTE on replica_release for the admin role",
		SQL:    `GRANT EXECUTE ON FUNCTION control_core.replica_release(text, uuid) TO {admin}`,
		Object: "control_core.replica_release(text, uuid)", Runtime: true},
	{Name: "the missed-occurrence counter's check dropped",
		SQL:    `ALTER TABLE control_core.trigger_schedules DROP CONSTRAINT trigger_schedules_missed_total_check`,
		Object: "trigger_schedules_missed_total_check", Runtime: true},
}
