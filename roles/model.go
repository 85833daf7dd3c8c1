package roles

import "github.com/qlcontrol/controlcore/db"

// The expected privilege model of control-core v28, as data a DBA can read against
// sql/migrations/0013_role_baseline.sql, 0017_exact_grants.sql, 0018_plugin_packages.sql,
// 0019_audit_by_database.sql, 0022_dispatch_loop.sql, 0023_loop_integrity.sql,
// 0024_replicas.sql, 0025_definition_lifecycle.sql, 0026_lock_order.sql, 0027_pooled_hot_path.sql, 0028_retry_contract_register_refusal.sql, 0029_pooled_plan_settings.sql and `qlmigrate roles create` (Create and GrantDatabase in create.go). `qlmigrate verify` and
// `qlmigrate grants` compare the catalogs with it exactly: a privilege the model does not list is
// drift as much as one it lists and the database lacks.
//
// Roles are named by their part (Owner, Admin, Runtime, WorkerIngress); Names maps them onto the
// configured prefix. PUBLIC holds nothing anywhere: not on the database, not on the schema, not on
// any table, sequence, function or type, and not through default privileges.
//
// What the model says beyond the grants listed below:
//   - Ownership: the owner role owns schema control_core and every object in it (tables, goose's
//     control_core.goose_db_version and its sequence, functions, types). The database itself is
//     owned by whoever created it (usually the DBA's role) or by the owner role, never by the
//     admin, runtime or worker ingress role (DatabaseOwnerAllowed); its owner keeps its own
//     implicit privileges.
//   - Owners' own privileges: an owner holds every privilege its object kind has, as the server
//     defines them (read with acldefault at verify time: PostgreSQL 17 added MAINTAIN to tables,
//     so a PostgreSQL 17 server expects it and a 15 server does not; neither breaks).
//   - Objects the model does not name (a table someone added to control_core): owner only.
//   - Column privileges: none, on any control_core table.
//   - Privileges of the four roles on anything outside control_core (another schema, a table in
//     public, a function in pg_catalog, a language): none.
//   - Default privileges: exactly one entry, the owner role's global entry for functions without
//     PUBLIC's EXECUTE (ALTER DEFAULT PRIVILEGES FOR ROLE ql_owner REVOKE EXECUTE ON FUNCTIONS FROM
//     PUBLIC, pg-0013); no other entry for the four roles, for schema control_core, or granting to
//     one of the four roles.
//   - Role attributes (Attributes): LOGIN, and none of SUPERUSER, CREATEDB, CREATEROLE,
//     REPLICATION, BYPASSRLS; no CONNECTION LIMIT (-1) and no VALID UNTIL (or 'infinity').
//   - Memberships: none of the four roles is a member of any role (of each other, of a predefined
//     role such as pg_read_all_data, of anything): such a membership is drift. Memberships *in* the
//     four roles held by other roles are not the four roles' privileges and are reported as notes:
//     since PostgreSQL 16 a non-superuser CREATEROLE role that runs `roles create` is implicitly
//     granted ADMIN membership in every role it creates (grantor: the bootstrap superuser), and a
//     DBA or a connection pooler may be made a member of ql_owner to run migrations. Those belong
//     to the creator or the DBA; `grants` lists them so that they are seen. A LOGIN member that
//     may use the role (inherit or SET ROLE), directly or through other roles, is drift unless
//     the operator allows it by name (AuditOptions.AllowedMembers, --allow-member): whoever logs in
//     as it acts as the role.
//   - Settings, large objects, other databases: see audit_cluster.go.

// Part is a grantee by its part in the model, independent of the role prefix.
type Part string

const (
	Owner         Part = "owner"
	Admin         Part = "admin"
	Runtime       Part = "runtime"
	WorkerIngress Part = "worker_ingress"
	Public        Part = "PUBLIC"
	// DatabaseOwner is the database's owner (pg_database.datdba), whoever that is.
	DatabaseOwner Part = "database owner"
)

// DatabaseGrant is one grant on the control-core database.
type DatabaseGrant struct {
	To              Part
	Privileges      []string
	WithGrantOption bool
	GrantedBy       Part
	Source          string
}

// DatabaseGrants: PUBLIC loses its default CONNECT and TEMPORARY; worker ingress gets nothing,
// not even CONNECT.
var DatabaseGrants = []DatabaseGrant{
	{To: Owner, Privileges: []string{"CONNECT", "CREATE"}, WithGrantOption: true, GrantedBy: DatabaseOwner,
		Source: "qlmigrate roles create (GrantDatabase)"},
	{To: Admin, Privileges: []string{"CONNECT"}, GrantedBy: Owner, Source: "pg-0017-exact-grants"},
	{To: Runtime, Privileges: []string{"CONNECT"}, GrantedBy: Owner, Source: "pg-0017-exact-grants"},
}

// SchemaUsage: who may use schema control_core besides its owner (pg-0017).
var SchemaUsage = []Part{Admin, Runtime}

// TableGrant is what the admin and runtime roles may do with one table of control_core (granted
// by the owner role, without grant option). Worker ingress and PUBLIC hold nothing on any table.
type TableGrant struct {
	Table   string
	Admin   []string
	Runtime []string
	Source  string
}

var (
	sel = []string{"SELECT"}
	siu = []string{"SELECT", "INSERT", "UPDATE"}
	si  = []string{"SELECT", "INSERT"}
)

// Tables is every table of control_core (v28, 24 with goose's version table).
var Tables = []TableGrant{
	// pg-0001: capability ladder (read by readiness) and the checksum ledger (owner only).
	{Table: "capabilities", Admin: sel, Runtime: sel, Source: "pg-0017"},
	{Table: "migration_ledger", Source: "owner only"},
	{Table: "migration_acceptances", Source: "owner only"},
	// goose's own version table, created by `up` in control_core: owner only.
	{Table: "goose_db_version", Source: "owner only"},
	// the publisher writes projects, tasks, triggers and their immutable revisions
	{Table: "projects", Admin: siu, Runtime: sel, Source: "pg-0017"},
	{Table: "execution_revisions", Admin: si, Runtime: sel, Source: "pg-0017"},
	{Table: "tasks", Admin: siu, Runtime: sel, Source: "pg-0017"},
	{Table: "task_revisions", Admin: si, Runtime: sel, Source: "pg-0017"},
	{Table: "triggers", Admin: siu, Runtime: sel, Source: "pg-0017"},
	{Table: "trigger_revisions", Admin: si, Runtime: sel, Source: "pg-0017"},
	// ADR-0105: the runtime role only reads and updates schedule rows (claim, advance, release):
	// no INSERT, no DELETE. The admin role creates and resets them only through reset_schedule,
	// which follows a trigger head that moved (pg-0019): no INSERT or UPDATE of its own.
	{Table: "trigger_schedules", Admin: sel, Runtime: []string{"SELECT", "UPDATE"}, Source: "pg-0017, pg-0019"},
	// admission and recovery: the runtime role inserts Runs, Attempts and events
	{Table: "runs", Admin: sel, Runtime: siu, Source: "pg-0017"},
	{Table: "attempts", Admin: sel, Runtime: siu, Source: "pg-0017"},
	{Table: "run_events", Admin: sel, Runtime: si, Source: "pg-0017"},
	// the dispatcher's durable contract, kept by the runtime role
	{Table: "worker_sessions", Admin: sel, Runtime: siu, Source: "pg-0017"},
	{Table: "run_leases", Admin: sel, Runtime: siu, Source: "pg-0017"},
	{Table: "dispatch_offers", Admin: sel, Runtime: siu, Source: "pg-0017"},
	// pg-0022: workers authenticate by token hash (the dispatcher, as the runtime role, reads);
	// the admin role creates and revokes tokens, guarded and audited by triggers; worker ingress
	// holds nothing (workers never reach the database)
	{Table: "worker_tokens", Admin: siu, Runtime: sel, Source: "pg-0022"},
	// pg-0024: one registration row per replica owner; the runtime role writes it only through
	// replica_register, replica_heartbeat and replica_release (SECURITY DEFINER), the admin role
	// lists it
	{Table: "replicas", Admin: sel, Source: "pg-0024"},
	// every admin change leaves an audit row, written by the database (pg-0019): the admin role
	// reads the log and cannot write a row of its own
	{Table: "admin_audit_log", Admin: sel, Source: "pg-0017, pg-0019"},
	// pg-0018: admin-only Plugin Package tables
	{Table: "plugin_packages", Admin: []string{"SELECT", "INSERT", "UPDATE", "DELETE"}, Source: "pg-0018"},
	{Table: "plugin_package_versions", Admin: []string{"SELECT", "INSERT", "UPDATE", "DELETE"}, Source: "pg-0018"},
	{Table: "project_plugin_bindings", Admin: []string{"SELECT", "INSERT", "UPDATE", "DELETE"}, Source: "pg-0018"},
	// pg-0025: archived triggers, written only by archive_trigger (SECURITY DEFINER)
	{Table: "archived_triggers", Admin: sel, Source: "pg-0025"},
}

// FunctionGrant is who may EXECUTE one function of control_core besides its owner.
type FunctionGrant struct {
	Function string // control_core.name(argument types), as the catalogs render it
	Execute  []Part
	Source   string
}

// Functions is every function of control_core. PUBLIC's default EXECUTE is revoked from each
// (pg-0013 for those that existed then, the default privilege for those created later).
var Functions = []FunctionGrant{
	{Function: "control_core.advance_capability(text, integer, text, text)", Source: "pg-0001; migrations only"},
	{Function: "control_core.admin_audit_log_stamp()", Source: "pg-0015: fires as the admin audit log's BEFORE INSERT trigger, which needs no EXECUTE"},
	{Function: "control_core.db_now_ms()", Execute: []Part{Admin, Runtime}, Source: "pg-0017"},
	{Function: "control_core.project_digest(text, text, bigint)", Execute: []Part{Admin, Runtime}, Source: "pg-0002, granted in pg-0017"},
	{Function: "control_core.execution_digest(jsonb)", Execute: []Part{Admin, Runtime}, Source: "pg-0003, granted in pg-0017"},
	{Function: "control_core.task_digest(text, bigint, uuid, text)", Execute: []Part{Admin, Runtime}, Source: "pg-0004, granted in pg-0017"},
	{Function: "control_core.trigger_digest(text, text, text, text, bigint, boolean, text, bigint)", Execute: []Part{Admin, Runtime}, Source: "pg-0005, granted in pg-0017"},
	{Function: "control_core.cron_idempotency_key(text, bigint, bigint)", Execute: []Part{Admin, Runtime}, Source: "pg-0006, granted in pg-0017"},
	{Function: "control_core.claim_fence_holds(text, uuid, bigint, bigint, text, uuid, bigint, bigint)", Execute: []Part{Admin, Runtime}, Source: "pg-0014, granted in pg-0017"},
	{Function: "control_core.trigger_fires(text, boolean)", Execute: []Part{Admin, Runtime}, Source: "pg-0014, granted in pg-0017"},
	{Function: "control_core.schedule_claimable(text, boolean, uuid, bigint, bigint)", Execute: []Part{Admin, Runtime}, Source: "pg-0014, granted in pg-0017"},
	{Function: "control_core.lock_project(text, text)", Execute: []Part{Admin}, Source: "pg-0018: the audited Project lock is admin-only; SECURITY DEFINER since pg-0019, to write its audit row; FOR NO KEY UPDATE since pg-0026"},
	// pg-0019: the database writes the admin audit log
	{Function: "control_core.audit_write(text, text, text, jsonb)", Source: "pg-0019: the audit triggers' one writer; owner only"},
	{Function: "control_core.audit_reason()", Source: "pg-0019: read by the audit triggers; owner only"},
	{Function: "control_core.audit_written_here(xid)", Source: "pg-0019: read by the audit triggers; owner only"},
	{Function: "control_core.audit_projects()", Source: "pg-0019: fires as the projects table's AFTER trigger, which needs no EXECUTE"},
	{Function: "control_core.audit_task_revisions()", Source: "pg-0019: fires as the task revisions' AFTER INSERT trigger, which needs no EXECUTE"},
	{Function: "control_core.audit_trigger_revisions()", Source: "pg-0019: fires as the trigger revisions' AFTER INSERT trigger, which needs no EXECUTE"},
	{Function: "control_core.audit_heads()", Source: "pg-0019: fires as the tasks and triggers tables' deferred trigger, which needs no EXECUTE"},
	{Function: "control_core.audit_execution_revisions()", Source: "pg-0019: fires as the execution revisions' deferred trigger, which needs no EXECUTE"},
	{Function: "control_core.audit_plugins()", Source: "pg-0019: fires as the Plugin Package tables' AFTER trigger, which needs no EXECUTE"},
	{Function: "control_core.reset_schedule(text, text)", Execute: []Part{Admin}, Source: "pg-0019: the admin role's one way to write a schedule row"},
	{Function: "control_core.runs_identity_guard()", Source: "pg-0006: fires as the runs table's BEFORE UPDATE trigger, which needs no EXECUTE"},
	{Function: "control_core.attempts_keep_live_run_attempt()", Source: "pg-0020: fires as the attempts table's BEFORE DELETE, UPDATE OF run_id and TRUNCATE triggers, which need no EXECUTE"},
	// pg-0022: the closed loop's rule functions (inlined into both roles' queries), its trigger
	// functions (owner only) and the admin's audited cancel
	{Function: "control_core.task_digest(text, bigint, uuid, text, integer, bigint, jsonb)", Execute: []Part{Admin, Runtime}, Source: "pg-0022: the digest with retry policy and worker selector"},
	{Function: "control_core.retry_at_ms(text, integer, integer, integer, bigint, bigint)", Execute: []Part{Admin, Runtime}, Source: "pg-0023: supersedes the 5-argument form (dropped by pg-0028); a hand-back is not an attempt"},
	{Function: "control_core.max_hand_backs()", Execute: []Part{Admin, Runtime}, Source: "pg-0023: inlined into retry_at_ms"},
	{Function: "control_core.attempt_live_shape(text, text, uuid, uuid, uuid, text, bigint, bigint, jsonb, jsonb)", Execute: []Part{Admin, Runtime}, Source: "pg-0022"},
	{Function: "control_core.run_attempt_states_agree(text, text)", Execute: []Part{Admin, Runtime}, Source: "pg-0022: also called by run_attempt_agree as whoever commits"},
	{Function: "control_core.worker_tokens_guard()", Source: "pg-0022: fires as worker_tokens' BEFORE trigger, which needs no EXECUTE"},
	{Function: "control_core.audit_worker_tokens()", Source: "pg-0022: fires as worker_tokens' AFTER trigger, which needs no EXECUTE"},
	{Function: "control_core.run_attempt_agree()", Source: "pg-0022, pg-0023: fires as the runs and attempts tables' deferred trigger (I1), which needs no EXECUTE"},
	{Function: "control_core.cancel_run(uuid, text)", Execute: []Part{Admin}, Source: "pg-0022: the admin role's one way to change a Run; SECURITY DEFINER, audited"},
	// pg-0024: a replica's registration, the runtime role's only way to write control_core.replicas
	{Function: "control_core.replica_register(text, uuid, text, text, bigint)", Execute: []Part{Runtime}, Source: "pg-0024: SECURITY DEFINER"},
	{Function: "control_core.replica_heartbeat(text, uuid, bigint)", Execute: []Part{Runtime}, Source: "pg-0024: SECURITY DEFINER"},
	{Function: "control_core.replica_release(text, uuid)", Execute: []Part{Runtime}, Source: "pg-0024: SECURITY DEFINER"},
	// pg-0025: the definition lifecycle, SECURITY DEFINER and audited, the admin role's only (it
	// holds no INSERT on runs and no DELETE in the loop; the runtime gets none of them)
	{Function: "control_core.run_now(text, text, uuid, text)", Execute: []Part{Admin}, Source: "pg-0025: one verified manual Run of a trigger's head"},
	{Function: "control_core.archive_trigger(text, text)", Execute: []Part{Admin}, Source: "pg-0025"},
	{Function: "control_core.prune_runs(text, bigint, integer, boolean)", Execute: []Part{Admin}, Source: "pg-0025: old terminal Runs and their rows, in batches"},
	{Function: "control_core.archived_trigger_guard()", Source: "pg-0025: fires as triggers' and trigger_schedules' BEFORE trigger, which needs no EXECUTE"},
	// pg-0027: the claim and the admit as PL/pgSQL functions (SECURITY INVOKER), which the
	// runtime calls behind a transaction pooler
	{Function: "control_core.claim_due(text, bigint, bigint, integer)", Execute: []Part{Runtime}, Source: "pg-0027: the claim, planned once per server session"},
	{Function: "control_core.admit(text[], text[], text[], text[], uuid[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], text[], text[], text[], uuid[], text[], text[], bigint[], uuid[], bigint[], bigint[])", Execute: []Part{Runtime}, Source: "pg-0027: the admit, planned once per server session"},
}

// DefaultPrivilege is the one default-ACL entry the model has: for functions the owner role
// creates, in any schema, only the owner may EXECUTE (PUBLIC's default EXECUTE is revoked).
var DefaultPrivilege = struct {
	ForRole    Part
	ObjectType string // pg_default_acl.defaclobjtype: f = functions
	Grants     []Part // who holds EXECUTE by default
	Source     string
}{ForRole: Owner, ObjectType: "f", Grants: []Part{Owner}, Source: "pg-0013-role-baseline"}

// Attributes are the attributes every one of the four roles must have (true) or lack (false).
var Attributes = []struct {
	Name string // as in CREATE ROLE; the opposite is NO<Name>
	Want bool
}{
	{"LOGIN", true},
	{"SUPERUSER", false},
	{"CREATEDB", false},
	{"CREATEROLE", false},
	{"REPLICATION", false},
	{"BYPASSRLS", false},
}

// attributesOf says which of the model's Attributes r has, by name.
func attributesOf(r db.RoleAttributesRow) map[string]bool {
	return map[string]bool{"LOGIN": r.CanLogin.Bool, "SUPERUSER": r.Superuser.Bool, "CREATEDB": r.CreateDb.Bool,
		"CREATEROLE": r.CreateRole.Bool, "REPLICATION": r.Replication.Bool, "BYPASSRLS": r.BypassRls.Bool}
}

// attrWord is name as CREATE ROLE writes it on, or its NO<name> opposite.
func attrWord(name string, on bool) string {
	if on {
		return name
	}
	return "NO" + name
}

// Role returns the name of part under names ("PUBLIC" for Public).
func (n Names) Role(p Part) string {
	switch p {
	case Owner:
		return n.Owner
	case Admin:
		return n.Admin
	case Runtime:
		return n.Runtime
	case WorkerIngress:
		return n.WorkerIngress
	default:
		return string(p)
	}
}
