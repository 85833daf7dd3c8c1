// Package drifttest lists the catalog changes a hostile DBA or a careless operator can make to a
// migrated control-core database, one per class of finding that `qlmigrate verify` and
// `qlsched run`'s readiness must catch. The tests of both binaries run the same list, so the two
// cannot drift apart.
package drifttest

import (
	"slices"
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/roles"
)

// Case is one change, made as a superuser.
type Case struct {
	Name string
	// SQL is the change; {owner} {admin} {runtime} {worker} {db} are replaced by the quoted
	// names of the database's roles and the database, {prefix} by the roles' prefix (unquoted,
	// for the names of roles a case creates).
	SQL string
	// Object is what verify must name in the finding.
	Object string
	// Runtime: the change touches what the runtime reads or writes, so `qlsched run` must refuse.
	Runtime bool
	// PrivateRoles: the change alters a role itself (cluster-wide), so the test needs roles of
	// its own (testpg.NewPrivate).
	PrivateRoles bool
	// Undo, run as a superuser when the test ends (before the roles are dropped), removes what
	// would keep DropWithRoles from dropping them: a parameter privilege (pg_parameter_acl is
	// cluster-wide, and a role holding one cannot be dropped). Same placeholders as SQL.
	Undo string
}

// DB returns a migrated database for the case: one with roles of its own when it changes a role.
func (c Case) DB(t testing.TB) *testpg.DB {
	t.Helper()
	d := testpg.New
	if c.PrivateRoles {
		d = testpg.NewPrivate
	}
	db := d(t)
	if c.Undo != "" {
		// registered after the database's own clean-up, so it runs first
		t.Cleanup(func() { db.Exec(t, render(c.Undo, db.Name, db.Names)) })
	}
	return db
}

// Render fills the placeholders of c.SQL for database and names.
func (c Case) Render(database string, names roles.Names) string {
	return render(c.SQL, database, names)
}

func render(sql, database string, names roles.Names) string {
	q := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	return strings.NewReplacer("{owner}", q(names.Owner), "{admin}", q(names.Admin), "{runtime}", q(names.Runtime),
		"{worker}", q(names.WorkerIngress), "{db}", q(database), "{prefix}", names.Prefix).Replace(sql)
}

// Cases is every class: issue 16's points 1 and 2 (firstRound), then issue 30's, 37's and 32's, one file per
// class so that each class's cases stay beside each other.
var Cases = slices.Concat(firstRound, enforcement, settings, database, writers, builtins, strictness, repair, reads, recovery, dispatch, replicas, pooled, parameters)

// firstRound is issue 16's points 1 and 2.
var firstRound = []Case{
	// Behaviour of the schema (point 1).
	{Name: "user trigger that inserts a second run",
		SQL: `CREATE FUNCTION public.dup_run() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
		      CREATE TRIGGER dup_run AFTER INSERT ON control_core.runs FOR EACH ROW EXECUTE FUNCTION public.dup_run()`,
		Object: "dup_run", Runtime: true},
	{Name: "row-level security without a policy",
		SQL: `ALTER TABLE control_core.trigger_schedules ENABLE ROW LEVEL SECURITY`, Object: "control_core.trigger_schedules", Runtime: true},
	{Name: "forced row-level security",
		SQL: `ALTER TABLE control_core.runs FORCE ROW LEVEL SECURITY`, Object: "control_core.runs", Runtime: true},
	{Name: "a policy",
		SQL: `CREATE POLICY hide_all ON control_core.runs USING (false)`, Object: "hide_all", Runtime: true},
	{Name: "a rewrite rule",
		SQL: `CREATE RULE swallow AS ON INSERT TO control_core.run_events DO INSTEAD NOTHING`, Object: "swallow", Runtime: true},
	{Name: "an unlogged table",
		SQL: `ALTER TABLE control_core.run_events SET UNLOGGED`, Object: "control_core.run_events", Runtime: true},
	{Name: "foreign-key triggers disabled",
		SQL: `ALTER TABLE control_core.attempts DISABLE TRIGGER ALL`, Object: "control_core.attempts", Runtime: true},
	{Name: "a foreign key not validated",
		SQL: `ALTER TABLE control_core.attempts DROP CONSTRAINT attempts_run_id_fkey,
		      ADD CONSTRAINT attempts_run_id_fkey FOREIGN KEY (run_id) REFERENCES control_core.runs (run_id) NOT VALID`,
		Object: "attempts_run_id_fkey", Runtime: true},
	{Name: "a foreign key made deferrable",
		SQL:    `ALTER TABLE control_core.attempts ALTER CONSTRAINT attempts_run_id_fkey DEFERRABLE INITIALLY DEFERRED`,
		Object: "attempts_run_id_fkey", Runtime: true},
	{Name: "a column default changed",
		SQL: `ALTER TABLE control_core.runs ALTER COLUMN created_at_ms SET DEFAULT 1`, Object: "control_core.runs.created_at_ms", Runtime: true},
	{Name: "a column collation changed",
		SQL: `ALTER TABLE control_core.run_events ALTER COLUMN type TYPE text COLLATE "C"`, Object: "control_core.run_events.type", Runtime: true},
	{Name: "an identity column added",
		SQL: `ALTER TABLE control_core.run_events ADD COLUMN n bigint GENERATED ALWAYS AS IDENTITY`, Object: "control_core.run_events.n", Runtime: true},
	{Name: "a generated column added",
		SQL: `ALTER TABLE control_core.run_events ADD COLUMN g bigint GENERATED ALWAYS AS (seq * 2) STORED`, Object: "control_core.run_events.g", Runtime: true},
	{Name: "an extra NOT NULL column without default",
		SQL: `ALTER TABLE control_core.runs ADD COLUMN forced text NOT NULL`, Object: "control_core.runs.forced", Runtime: true},
	{Name: "an extra unique index",
		SQL: `CREATE UNIQUE INDEX runs_one_per_project ON control_core.runs (project_id)`, Object: "runs_one_per_project", Runtime: true},
	{Name: "a key's index marked invalid",
		SQL:    `UPDATE pg_catalog.pg_index SET indisvalid = false WHERE indexrelid = 'control_core.runs_occurrence_key'::regclass`,
		Object: "runs_occurrence_key", Runtime: true},
	{Name: "the claim's index marked invalid",
		SQL:    `UPDATE pg_catalog.pg_index SET indisvalid = false WHERE indexrelid = 'control_core.trigger_schedules_claim_idx'::regclass`,
		Object: "trigger_schedules_claim_idx", Runtime: true},
	{Name: "an extra CHECK constraint",
		SQL: `ALTER TABLE control_core.runs ADD CONSTRAINT runs_never CHECK (false) NOT VALID`, Object: "runs_never", Runtime: true},
	{Name: "a function's owner changed",
		SQL: `ALTER FUNCTION control_core.db_now_ms() OWNER TO {admin}`, Object: "control_core.db_now_ms()", Runtime: true},
	{Name: "a function made SECURITY DEFINER",
		SQL: `ALTER FUNCTION control_core.db_now_ms() SECURITY DEFINER`, Object: "control_core.db_now_ms()", Runtime: true},
	{Name: "a function given a setting",
		SQL: `ALTER FUNCTION control_core.db_now_ms() SET search_path = public`, Object: "control_core.db_now_ms()", Runtime: true},
	{Name: "a function's volatility changed",
		SQL: `ALTER FUNCTION control_core.db_now_ms() VOLATILE`, Object: "control_core.db_now_ms()", Runtime: true},
	{Name: "a cast replacing a built-in conversion",
		SQL: `CREATE FUNCTION public.totid(text) RETURNS tid LANGUAGE sql IMMUTABLE AS $$ SELECT '(0,1)'::tid $$;
		      CREATE CAST (text AS tid) WITH FUNCTION public.totid(text)`,
		Object: "cast (text AS tid)", Runtime: true},
	{Name: "an event trigger",
		SQL: `CREATE FUNCTION public.on_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$ BEGIN END $$;
		      CREATE EVENT TRIGGER on_ddl ON ddl_command_start EXECUTE FUNCTION public.on_ddl()`, Object: "on_ddl", Runtime: true},

	// Roles and the database (point 2).
	{Name: "a setting of the runtime role",
		SQL: `ALTER ROLE {runtime} SET statement_timeout = '1s'`, Object: "statement_timeout", Runtime: true, PrivateRoles: true},
	{Name: "session_replication_role for the runtime role",
		SQL: `ALTER ROLE {runtime} SET session_replication_role = replica`, Object: "session_replication_role", Runtime: true, PrivateRoles: true},
	{Name: "a setting of the runtime role in this database",
		SQL: `ALTER ROLE {runtime} IN DATABASE {db} SET work_mem = '1MB'`, Object: "work_mem", Runtime: true, PrivateRoles: true},
	{Name: "a setting of the database",
		SQL: `ALTER DATABASE {db} SET default_transaction_isolation = 'read committed'`, Object: "default_transaction_isolation", Runtime: true, PrivateRoles: true},
	{Name: "the runtime role's VALID UNTIL",
		SQL: `ALTER ROLE {runtime} VALID UNTIL '2999-01-01'`, Object: "VALID UNTIL", Runtime: true, PrivateRoles: true},
	{Name: "the runtime role's CONNECTION LIMIT",
		SQL: `ALTER ROLE {runtime} CONNECTION LIMIT 5`, Object: "CONNECTION LIMIT", Runtime: true, PrivateRoles: true},
	{Name: "a LOGIN member of the runtime role",
		SQL: `CREATE ROLE {prefix}intruder LOGIN; GRANT {runtime} TO {prefix}intruder`, Object: "intruder", Runtime: true, PrivateRoles: true},
	{Name: "a LOGIN member of the runtime role through a group",
		SQL: `CREATE ROLE {prefix}group NOLOGIN; GRANT {runtime} TO {prefix}group;
		      CREATE ROLE {prefix}via_group LOGIN; GRANT {prefix}group TO {prefix}via_group`, Object: "via_group", Runtime: true, PrivateRoles: true},
	{Name: "a large object owned by the runtime role",
		SQL:    `DO $$ BEGIN EXECUTE format('ALTER LARGE OBJECT %s OWNER TO {runtime}', pg_catalog.lo_from_bytea(0, 'x')); END $$`,
		Object: "large object", Runtime: false, PrivateRoles: true},
	{Name: "DELETE and TRUNCATE on runs for the runtime role",
		SQL: `GRANT DELETE, TRUNCATE ON control_core.runs TO {runtime}`, Object: "control_core.runs", Runtime: true},
	{Name: "CREATE on the schema for the runtime role",
		SQL: `GRANT CREATE ON SCHEMA control_core TO {runtime}`, Object: "control_core", Runtime: true},
	{Name: "DELETE on runs for the admin role",
		SQL: `GRANT DELETE ON control_core.runs TO {admin}`, Object: "control_core.runs", Runtime: true},
	{Name: "a setting of the admin role (not the runtime's)",
		SQL: `ALTER ROLE {admin} SET work_mem = '1MB'`, Object: "work_mem", Runtime: false, PrivateRoles: true},
	{Name: "an extra privilege on an admin-only table (not the runtime's)",
		SQL: `GRANT SELECT ON control_core.plugin_packages TO {worker}`, Object: "control_core.plugin_packages", Runtime: false},
	{Name: "a SECURITY DEFINER function in public that deletes every run",
		SQL: `CREATE FUNCTION public.evil() RETURNS void SECURITY DEFINER LANGUAGE sql
		      AS 'DELETE FROM control_core.attempts; DELETE FROM control_core.run_events; DELETE FROM control_core.runs'`,
		Object: "public.evil()", Runtime: true},
	{Name: "a large object granted to PUBLIC",
		SQL:    `DO $$ BEGIN EXECUTE format('GRANT SELECT, UPDATE ON LARGE OBJECT %s TO PUBLIC', pg_catalog.lo_from_bytea(0, 'x')); END $$`,
		Object: "large object", Runtime: false},
	{Name: "a publication with a row filter on the schedules",
		SQL: `CREATE PUBLICATION hp2 FOR TABLE control_core.trigger_schedules WHERE (claim_owner IS NULL)`, Object: "hp2", Runtime: true},
	{Name: "a publication with a column list on the schedules",
		SQL: `CREATE PUBLICATION hp3 FOR TABLE control_core.trigger_schedules (claim_owner)`, Object: "hp3", Runtime: true},
	{Name: "an extra column of a NOT NULL domain",
		SQL:    `CREATE DOMAIN public.nn AS text NOT NULL; ALTER TABLE control_core.runs ADD COLUMN hx public.nn`,
		Object: "control_core.runs.hx", Runtime: true},
	{Name: "a function body replaced",
		SQL: `CREATE OR REPLACE FUNCTION control_core.lock_project(p_project_id text, p_reason text) RETURNS bigint
		      LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog AS $$ BEGIN RETURN 0; END $$`,
		Object: "control_core.lock_project(text, text)", Runtime: true},
	{Name: "the project lock back to FOR UPDATE (pg-0019's body: a publish deadlocks with an admit)",
		SQL: `CREATE OR REPLACE FUNCTION control_core.lock_project(p_project_id text, p_reason text) RETURNS bigint
		      LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog AS $$
		      DECLARE v_revision bigint;
		      BEGIN
		          SELECT revision INTO v_revision FROM control_core.projects WHERE project_id = p_project_id FOR UPDATE;
		          RETURN v_revision;
		      END $$`,
		Object: "control_core.lock_project(text, text)", Runtime: true},
	{Name: "the database-time function body replaced",
		SQL:    `CREATE OR REPLACE FUNCTION control_core.db_now_ms() RETURNS bigint LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT 1::bigint $$`,
		Object: "control_core.db_now_ms()", Runtime: true},
}
