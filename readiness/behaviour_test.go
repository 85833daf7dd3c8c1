package readiness_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/checksums"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/readiness"
	"github.com/qlcontrol/controlcore/sql/migrations"
)

// A hostile or careless change of the catalogs that alters what a statement on a control_core
// table does (or what a migration does) is drift naming the object, and its fix statements,
// run by a superuser in one transaction, remove it; an inert addition is only a note.
func TestReadinessCatchesWhatChangesBehaviour(t *testing.T) {
	t.Parallel()
	contract, err := readiness.Contract()
	if err != nil {
		t.Fatal(err)
	}
	stream, err := checksums.Load(migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	loc := readiness.NewLocator(migrations.FS, stream)
	userTrigger := ""
	for _, f := range contract {
		if f.Kind == "trigger" {
			userTrigger = f.Name + " ON " + strings.TrimPrefix(f.Object, "table ")
			break
		}
	}
	if userTrigger == "" {
		t.Fatal("the contract has no user trigger to enable for replicas")
	}
	const hostile = `p"; DROP TABLE control_core.runs; --`
	cases := []struct {
		name, setup string
		kind        string // the finding's kind
		object      string // a part of the finding's object
		note        bool   // inert: a note, no drift at all
		has         string // a part of its message or fix SQL
		noFix       bool   // no safe statement exists: SQL empty, Fix says so
	}{
		{name: "after insert trigger that inserts a second run", setup: `
			CREATE FUNCTION control_core.runs_twice() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF pg_trigger_depth() = 1 THEN
					NEW.run_id := gen_random_uuid();
					INSERT INTO control_core.runs SELECT NEW.*;
				END IF;
				RETURN NULL;
			END $$;
			CREATE TRIGGER runs_twice AFTER INSERT ON control_core.runs FOR EACH ROW EXECUTE FUNCTION control_core.runs_twice()`,
			kind: "extra_trigger", object: "runs_twice on control_core.runs", has: "DROP TRIGGER runs_twice ON control_core.runs;"},
		{name: "row level security enabled", setup: `ALTER TABLE control_core.trigger_schedules ENABLE ROW LEVEL SECURITY`,
			kind: "changed_row_security", object: "control_core.trigger_schedules", has: "DISABLE ROW LEVEL SECURITY"},
		{name: "row level security forced", setup: `ALTER TABLE control_core.trigger_schedules FORCE ROW LEVEL SECURITY`,
			kind: "changed_force_row_security", object: "control_core.trigger_schedules", has: "NO FORCE ROW LEVEL SECURITY"},
		{name: "policy with a hostile name", setup: `CREATE POLICY "p""; DROP TABLE control_core.runs; --" ON control_core.runs USING (false)`,
			kind: "extra_policy", object: hostile + " on control_core.runs", has: `DROP POLICY "p""; DROP TABLE control_core.runs; --" ON control_core.runs;`},
		{name: "rule", setup: `CREATE RULE runs_echo AS ON INSERT TO control_core.runs DO ALSO NOTIFY runs_inserted`,
			kind: "extra_rule", object: "runs_echo on control_core.runs", has: "DROP RULE runs_echo ON control_core.runs;"},
		// PostgreSQL refuses to make runs UNLOGGED ("it references logged table attempts");
		// the audit log it lets go.
		{name: "unlogged table", setup: `ALTER TABLE control_core.admin_audit_log SET UNLOGGED`,
			kind: "changed_persistence", object: "control_core.admin_audit_log", has: "SET LOGGED"},
		{name: "replica identity nothing", setup: `ALTER TABLE control_core.trigger_schedules REPLICA IDENTITY NOTHING`,
			kind: "changed_replica_identity", object: "control_core.trigger_schedules", has: "REPLICA IDENTITY DEFAULT"},
		{name: "all triggers disabled, the foreign keys' too", setup: `ALTER TABLE control_core.runs DISABLE TRIGGER ALL`,
			kind: "changed_internal_triggers", object: "runs_project_id_fkey", has: "ALTER TABLE control_core.runs ENABLE TRIGGER ALL;"},
		{name: "foreign key of another table disabled here", setup: `ALTER TABLE control_core.runs DISABLE TRIGGER ALL`,
			kind: "changed_internal_triggers", object: "attempts.attempts_run_id_fkey", has: "disabled, disabled"},
		{name: "foreign key triggers fire on replicas only", setup: `DO $$ DECLARE t name; BEGIN
				FOR t IN SELECT tgname FROM pg_trigger WHERE tgrelid = 'control_core.attempts'::regclass AND tgisinternal LOOP
					EXECUTE format('ALTER TABLE control_core.attempts ENABLE REPLICA TRIGGER %I', t);
				END LOOP;
			END $$`,
			kind: "changed_internal_triggers", object: "attempts_run_id_fkey", has: "replica, replica"},
		{name: "user trigger fires on replicas only", setup: `ALTER TABLE ` + strings.SplitN(userTrigger, " ON ", 2)[1] +
			` ENABLE REPLICA TRIGGER ` + strings.SplitN(userTrigger, " ON ", 2)[0],
			kind: "changed_trigger_enabled", object: strings.SplitN(userTrigger, " ON ", 2)[0], has: "ENABLE TRIGGER"},
		{name: "user trigger dropped", setup: `DROP TRIGGER ` + userTrigger,
			kind: "missing_trigger", object: strings.SplitN(userTrigger, " ON ", 2)[0], has: "CREATE TRIGGER"},
		{name: "foreign key not valid (pg_get_constraintdef renders it)", setup: `ALTER TABLE control_core.attempts
			DROP CONSTRAINT attempts_run_id_fkey,
			ADD CONSTRAINT attempts_run_id_fkey FOREIGN KEY (run_id) REFERENCES control_core.runs (run_id) NOT VALID`,
			kind: "changed_constraint", object: "attempts_run_id_fkey on control_core.attempts", has: "ALTER TABLE control_core.attempts VALIDATE CONSTRAINT attempts_run_id_fkey;"},
		{name: "foreign key deferrable (pg_get_constraintdef renders it)", setup: `ALTER TABLE control_core.attempts
			DROP CONSTRAINT attempts_run_id_fkey,
			ADD CONSTRAINT attempts_run_id_fkey FOREIGN KEY (run_id) REFERENCES control_core.runs (run_id) DEFERRABLE INITIALLY DEFERRED`,
			kind: "changed_constraint", object: "attempts_run_id_fkey on control_core.attempts", has: "DEFERRABLE INITIALLY DEFERRED"},
		{name: "column default changed", setup: `ALTER TABLE control_core.runs ALTER COLUMN created_at_ms SET DEFAULT 0`,
			kind: "changed_column", object: "control_core.runs.created_at_ms", has: "ALTER TABLE control_core.runs ALTER COLUMN created_at_ms SET DEFAULT control_core.db_now_ms();"},
		{name: "column collation changed", setup: `ALTER TABLE control_core.runs ALTER COLUMN project_id TYPE text COLLATE "C"`,
			kind: "changed_column", object: "control_core.runs.project_id", has: `TYPE text COLLATE pg_catalog."default";`},
		{name: "column type changed: no safe fix", setup: `ALTER TABLE control_core.projects ALTER COLUMN revision TYPE integer`,
			kind: "changed_column", object: "control_core.projects.revision", has: "no safe statement", noFix: true},
		{name: "identity column added", setup: `ALTER TABLE control_core.runs ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY`,
			kind: "extra_column", object: "control_core.runs.seq", has: "DROP IDENTITY"},
		{name: "generated column added", setup: `ALTER TABLE control_core.runs ADD COLUMN due_s bigint GENERATED ALWAYS AS (scheduled_for_ms / 1000) STORED`,
			kind: "extra_column", object: "control_core.runs.due_s", has: "DROP EXPRESSION"},
		{name: "extra NOT NULL column without default", setup: `ALTER TABLE control_core.runs ADD COLUMN label text NOT NULL`,
			kind: "extra_column", object: "control_core.runs.label", has: "ALTER TABLE control_core.runs ALTER COLUMN label DROP NOT NULL;"},
		{name: "extra column with a default and a hostile name", setup: `ALTER TABLE control_core.runs ADD COLUMN "x; DROP TABLE control_core.runs; --" text DEFAULT 'x'`,
			kind: "extra_column", object: "control_core.runs.x; DROP TABLE", has: `ALTER COLUMN "x; DROP TABLE control_core.runs; --" DROP DEFAULT;`},
		{name: "extra nullable column", setup: `ALTER TABLE control_core.runs ADD COLUMN remark text`,
			kind: "extra_column", object: "control_core.runs.remark", note: true},
		{name: "extra unique index", setup: `CREATE UNIQUE INDEX runs_state_key ON control_core.runs (project_id, state)`,
			kind: "extra_index", object: "control_core.runs_state_key", has: "DROP INDEX control_core.runs_state_key;"},
		{name: "extra expression index", setup: `CREATE INDEX runs_ratio_idx ON control_core.runs ((1 / length(state)))`,
			kind: "extra_index", object: "control_core.runs_ratio_idx", has: "DROP INDEX"},
		{name: "extra partial index", setup: `CREATE INDEX runs_queued_idx ON control_core.runs (project_id) WHERE state = 'queued'`,
			kind: "extra_index", object: "control_core.runs_queued_idx", has: "DROP INDEX"},
		{name: "extra plain index", setup: `CREATE INDEX runs_state_idx ON control_core.runs (state)`,
			kind: "extra_index", object: "control_core.runs_state_idx", note: true},
		{name: "extra CHECK constraint", setup: `ALTER TABLE control_core.runs ADD CONSTRAINT runs_no_queue_check CHECK (state <> 'queued') NOT VALID`,
			kind: "extra_constraint", object: "runs_no_queue_check on control_core.runs", has: "DROP CONSTRAINT runs_no_queue_check;"},
		{name: "extra table with a foreign key into runs", setup: `CREATE TABLE public.run_notes (run_id uuid REFERENCES control_core.runs)`,
			kind: "extra_internal_triggers", object: "public.run_notes.run_notes_run_id_fkey on control_core.runs",
			has: "ALTER TABLE public.run_notes DROP CONSTRAINT run_notes_run_id_fkey;"},
		{name: "extra table inheriting the schedules", setup: `CREATE TABLE public.shadow_schedules () INHERITS (control_core.trigger_schedules)`,
			kind: "extra_inherited_by", object: "public.shadow_schedules inherits control_core.trigger_schedules", has: "NO INHERIT"},
		{name: "extra table", setup: `CREATE TABLE control_core.scratch (id int NOT NULL DEFAULT 1)`,
			kind: "extra_table", object: "control_core.scratch", note: true},
		{name: "function owner changed", setup: `ALTER FUNCTION control_core.db_now_ms() OWNER TO CURRENT_USER`,
			kind: "changed_owner", object: "control_core.db_now_ms()", has: "ALTER FUNCTION control_core.db_now_ms() OWNER TO "},
		{name: "function made security definer", setup: `ALTER FUNCTION control_core.db_now_ms() SECURITY DEFINER`,
			kind: "changed_security", object: "control_core.db_now_ms()", has: "SECURITY INVOKER"},
		{name: "function given a search_path", setup: `ALTER FUNCTION control_core.db_now_ms() SET search_path = public`,
			kind: "changed_config", object: "control_core.db_now_ms()", has: "ALTER FUNCTION control_core.db_now_ms() RESET ALL;"},
		{name: "function search_path changed", setup: `ALTER FUNCTION control_core.lock_project(text, text) SET search_path = public, pg_catalog`,
			kind: "changed_config", object: "control_core.lock_project(text, text)", has: "SET search_path TO pg_catalog;"},
		{name: "function volatility", setup: `ALTER FUNCTION control_core.db_now_ms() IMMUTABLE`,
			kind: "changed_volatility", object: "control_core.db_now_ms()", has: "ALTER FUNCTION control_core.db_now_ms() STABLE;"},
		{name: "function made strict", setup: `ALTER FUNCTION control_core.lock_project(text, text) STRICT`,
			kind: "changed_null_input", object: "control_core.lock_project(text, text)", has: "CALLED ON NULL INPUT"},
		{name: "function body replaced (a migration statement without StatementBegin)", setup: `CREATE OR REPLACE FUNCTION control_core.db_now_ms() RETURNS bigint
			LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT 0::bigint $$`,
			kind: "changed_body", object: "control_core.db_now_ms()", has: "CREATE OR REPLACE FUNCTION control_core.db_now_ms() RETURNS bigint"},
		{name: "function body replaced (in a StatementBegin block)", setup: `CREATE OR REPLACE FUNCTION control_core.lock_project(p_project_id text, p_reason text)
			RETURNS bigint LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog AS $$ BEGIN RETURN 0; END $$`,
			kind: "changed_body", object: "control_core.lock_project(text, text)", has: "CREATE OR REPLACE FUNCTION control_core.lock_project(p_project_id text, p_reason text)"},
		{name: "trigger function body replaced", setup: `CREATE OR REPLACE FUNCTION control_core.admin_audit_log_stamp() RETURNS trigger
			LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog AS $$ BEGIN RETURN NEW; END $$`,
			kind: "changed_body", object: "control_core.admin_audit_log_stamp()", has: "NEW.actor := session_user;"},
		{name: "bootstrap function body replaced", setup: `CREATE OR REPLACE FUNCTION control_core.advance_capability(p_component text, p_version integer, p_name text, p_migration text)
			RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog AS $$ BEGIN END $$`,
			kind: "changed_body", object: "control_core.advance_capability(text, integer, text, text)", has: "CREATE OR REPLACE FUNCTION control_core.advance_capability("},
		{name: "function language changed", setup: `CREATE OR REPLACE FUNCTION control_core.db_now_ms() RETURNS bigint
			LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$ BEGIN RETURN 0; END $$`,
			kind: "changed_language", object: "control_core.db_now_ms()", has: "CREATE OR REPLACE FUNCTION control_core.db_now_ms()"},
		{name: "function given another setting beside its search_path", setup: `ALTER FUNCTION control_core.lock_project(text, text) SET work_mem = '1MB'`,
			kind: "changed_config", object: "control_core.lock_project(text, text)", has: "RESET ALL"},
		{name: "function arguments renamed: no fix in place", setup: `DROP FUNCTION control_core.lock_project(text, text);
			CREATE FUNCTION control_core.lock_project(a text, b text) RETURNS bigint LANGUAGE plpgsql AS $$ BEGIN RETURN 0; END $$`,
			kind: "changed_arguments", object: "control_core.lock_project(text, text)", has: "DROP FUNCTION control_core.lock_project(text, text)", noFix: true},
		{name: "function result changed: no fix in place", setup: `DROP FUNCTION control_core.db_now_ms() CASCADE;
			CREATE FUNCTION control_core.db_now_ms() RETURNS integer LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT 0 $$`,
			kind: "changed_returns", object: "control_core.db_now_ms()", has: "CREATE OR REPLACE FUNCTION cannot", noFix: true},
		{name: "publication with a row filter", setup: `CREATE PUBLICATION hp2 FOR TABLE control_core.trigger_schedules WHERE (claim_owner IS NULL)`,
			kind: "extra_publication", object: "hp2 of control_core.trigger_schedules", has: "ALTER PUBLICATION hp2 DROP TABLE control_core.trigger_schedules;"},
		{name: "publication with a column list and a hostile name", setup: `CREATE PUBLICATION "p""; DROP TABLE control_core.runs; --" FOR TABLE control_core.trigger_schedules (claim_owner)`,
			kind: "extra_publication", object: hostile + " of control_core.trigger_schedules",
			has: `ALTER PUBLICATION "p""; DROP TABLE control_core.runs; --" DROP TABLE control_core.trigger_schedules;`},
		{name: "publication with a row filter beside plain ones", setup: `CREATE PUBLICATION hp6 FOR TABLE control_core.runs, control_core.trigger_schedules WHERE (claim_version > 0) WITH (publish = 'update')`,
			kind: "extra_publication", object: "hp6 of control_core.trigger_schedules", has: "ALTER PUBLICATION hp6 DROP TABLE control_core.trigger_schedules;"},
		{name: "publication of a table", setup: `CREATE PUBLICATION hp3 FOR TABLE control_core.runs`,
			kind: "extra_publication", object: "hp3 of control_core.runs", note: true},
		{name: "publication of the schema", setup: `CREATE PUBLICATION hp4 FOR TABLES IN SCHEMA control_core`,
			kind: "extra_publication", object: "hp4 of control_core.trigger_schedules", note: true},
		{name: "publication of all tables", setup: `CREATE PUBLICATION hp5 FOR ALL TABLES`,
			kind: "extra_publication", object: "hp5 of control_core.runs", note: true},
		{name: "extra column of a NOT NULL domain", setup: `CREATE DOMAIN public.nn AS text NOT NULL; ALTER TABLE control_core.runs ADD COLUMN hx public.nn`,
			kind: "extra_column", object: "control_core.runs.hx", has: "ALTER TABLE control_core.runs ALTER COLUMN hx TYPE text;"},
		{name: "extra column of an array of a CHECK domain", setup: `CREATE DOMAIN public.pos AS integer CHECK (VALUE > 0); ALTER TABLE control_core.runs ADD COLUMN hy public.pos[]`,
			kind: "extra_column", object: "control_core.runs.hy", has: "ALTER TABLE control_core.runs ALTER COLUMN hy TYPE integer[];"},
		{name: "extra column of a defaulted domain over a domain", setup: `CREATE DOMAIN public.v10 AS varchar(10) CHECK (VALUE <> '');
			CREATE DOMAIN public.v10d AS public.v10 DEFAULT 'x'; ALTER TABLE control_core.runs ADD COLUMN hz public.v10d`,
			kind: "extra_column", object: "control_core.runs.hz", has: "ALTER TABLE control_core.runs ALTER COLUMN hz TYPE character varying(10);"},
		{name: "extra function", setup: `CREATE FUNCTION control_core.helper() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$`,
			kind: "extra_function", object: "control_core.helper()", note: true},
		{name: "enabled event trigger", setup: `
			CREATE FUNCTION public.ql_watch_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$ BEGIN END $$;
			CREATE EVENT TRIGGER ql_watch_ddl ON ddl_command_start EXECUTE FUNCTION public.ql_watch_ddl()`,
			kind: "extra_event_trigger", object: "ql_watch_ddl", has: "ALTER EVENT TRIGGER ql_watch_ddl DISABLE;"},
		{name: "disabled event trigger", setup: `
			CREATE FUNCTION public.ql_watch_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$ BEGIN END $$;
			CREATE EVENT TRIGGER ql_watch_ddl ON ddl_command_start EXECUTE FUNCTION public.ql_watch_ddl();
			ALTER EVENT TRIGGER ql_watch_ddl DISABLE`,
			kind: "extra_event_trigger", object: "ql_watch_ddl", note: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := testpg.New(t)
			d.Exec(t, c.setup)
			drift := readiness.Compare(contract, readFacts(t, d), loc)
			var found *readiness.Drift
			for i, f := range drift {
				if f.Kind == c.kind && strings.Contains(f.Object, c.object) {
					found = &drift[i]
					break
				}
			}
			if found == nil {
				t.Fatalf("want a finding %s naming %q, got\n%s", c.kind, c.object, list(drift))
			}
			if found.Note != c.note {
				t.Fatalf("finding %s %q: note %v, want %v", found.Kind, found.Object, found.Note, c.note)
			}
			if c.note {
				if d := drifts(drift); len(d) != 0 {
					t.Fatalf("an inert change: want notes only, got drift\n%s", list(d))
				}
				return
			}
			text := found.Message + "\n" + found.Fix + "\n" + strings.Join(found.SQL, "\n")
			if !strings.Contains(text, c.has) {
				t.Errorf("finding %s %q does not say %q:\n%s", found.Kind, found.Object, c.has, text)
			}
			if c.noFix {
				if len(found.SQL) != 0 {
					t.Errorf("want no fix SQL where none is safe, got %q", found.SQL)
				}
				return
			}
			if len(found.SQL) == 0 {
				t.Fatalf("finding %s %q has no fix SQL", found.Kind, found.Object)
			}
			applyFixes(t, d, drift)
			if after := drifts(readiness.Compare(contract, readFacts(t, d), loc)); len(after) != 0 {
				t.Errorf("after the fix SQL, drift remains:\n%s", list(after))
			}
		})
	}
}

// The readiness reads need no privilege beyond the runtime role's: qlsched run reads them as it.
func TestReadinessReadsAsTheRuntimeRole(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	ctx := context.Background()
	var drift []readiness.Drift
	err := pgx.BeginTxFunc(ctx, d.Pool(t, d.Names.Runtime), pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL search_path = pg_catalog"); err != nil {
			return err
		}
		var err error
		drift, err = readiness.ContractDrift(ctx, tx, readiness.Locator{})
		return err
	})
	if err != nil {
		t.Fatalf("read readiness as %s: %v", d.Names.Runtime, err)
	}
	if len(drift) != 0 {
		t.Errorf("a fresh database read as %s drifts:\n%s", d.Names.Runtime, list(drift))
	}
}

// BenchmarkReadReadiness is the readiness part of verify (and of qlsched run's readiness) on a
// clean v28 database: one read-only transaction, every catalog read, the comparison.
func BenchmarkReadReadiness(b *testing.B) {
	d := testpg.New(b)
	pool := d.Pool(b, "")
	ctx := context.Background()
	for b.Loop() {
		err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL search_path = pg_catalog"); err != nil {
				return err
			}
			drift, err := readiness.ContractDrift(ctx, tx, readiness.Locator{})
			if err == nil && len(drift) != 0 {
				b.Fatalf("a clean database drifts: %+v", drift)
			}
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// applyFixes runs every drift's fix SQL, in order, in one transaction as the superuser: what
// `qlmigrate verify --fix-sql` prints.
func applyFixes(t *testing.T, d *testpg.DB, drift []readiness.Drift) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, d.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, f := range drifts(drift) {
			for _, s := range f.SQL {
				if _, err := tx.Exec(ctx, s); err != nil {
					return fmt.Errorf("%s: %w", s, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("apply the fix: %v", err)
	}
}

func drifts(all []readiness.Drift) []readiness.Drift {
	var out []readiness.Drift
	for _, f := range all {
		if !f.Note {
			out = append(out, f)
		}
	}
	return out
}

func list(drift []readiness.Drift) string {
	var b strings.Builder
	for _, f := range drift {
		kind := "drift"
		if f.Note {
			kind = "note"
		}
		b.WriteString("  " + kind + " " + f.Kind + " " + f.Object + ": " + f.Message + " | " + strings.Join(f.SQL, " ") + "\n")
	}
	return b.String()
}
