package readiness_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/checksums"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/readiness"
	"github.com/qlcontrol/controlcore/sql/migrations"
)

var update = flag.Bool("update", false, "rewrite readiness_contract.txt from a freshly migrated database")

func TestMain(m *testing.M) { testpg.Main(m) }

// readFacts reads the readiness facts of d the way verify does: one read-only transaction whose
// search_path is pg_catalog only.
func readFacts(t *testing.T, d *testpg.DB) []readiness.Fact {
	t.Helper()
	ctx := context.Background()
	var facts []readiness.Fact
	err := pgx.BeginTxFunc(ctx, d.Pool(t, ""), pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL search_path = pg_catalog"); err != nil {
			return err
		}
		var err error
		facts, err = readiness.ReadFacts(ctx, tx)
		return err
	})
	if err != nil {
		t.Fatalf("read readiness: %v", err)
	}
	return facts
}

// The committed contract is exactly what the migrations produce: regenerate it with -update
// after adding a migration, and review the diff.
func TestReadinessContractMatchesAFreshMigration(t *testing.T) {
	t.Parallel()
	got := readiness.RenderContract(readFacts(t, testpg.New(t)))
	if *update {
		if err := os.WriteFile("readiness_contract.txt", got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile("readiness_contract.txt")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("readiness_contract.txt differs from a fresh migration's catalogs; if a migration changed the schema on purpose, run\n"+
			"  go test ./readiness -run TestReadinessContractMatchesAFreshMigration -update\nand review the diff. Fresh catalogs:\n%s", got)
	}
	contract, err := readiness.Contract()
	if err != nil {
		t.Fatal(err)
	}
	if drift := readiness.Compare(contract, readFacts(t, testpg.New(t)), readiness.Locator{}); len(drift) != 0 {
		t.Fatalf("a fresh v28 database drifts from the contract: %+v", drift)
	}
}

// The objects the hot queries and the composition root depend on are in the contract, so that
// regenerating it can never drop one silently.
func TestReadinessContractHoldsTheHotPathObjects(t *testing.T) {
	t.Parallel()
	text := string(mustRead(t, "readiness_contract.txt"))
	for _, want := range []string{
		"index trigger_schedules_claim_idx CREATE INDEX trigger_schedules_claim_idx ON control_core.trigger_schedules USING btree (",
		"index runs_recovery_drift_idx CREATE INDEX runs_recovery_drift_idx ON control_core.runs USING btree (",
		"index attempts_recovery_drift_idx CREATE INDEX attempts_recovery_drift_idx ON control_core.attempts USING btree (",
		"function control_core.attempts_keep_live_run_attempt()",
		"function control_core.runs_keep_live_attempt()",
		"constraint runs_idempotency_key_key UNIQUE (project_id, idempotency_key)",
		"constraint trigger_schedules_claim_fence_check CHECK",
		"constraint trigger_schedules_pkey PRIMARY KEY (project_id, trigger_id)",
		"column claim_token uuid null",
		"function control_core.db_now_ms()",
		"function control_core.advance_capability(text, integer, text, text)",
		"function control_core.lock_project(text, text)",
		// what the keys enforce beside their definitions, and goose's table (issue 30)
		"index_flags runs_occurrence_key indisunique=on indnullsnotdistinct=off indisprimary=off indisexclusion=off indimmediate=on",
		"flags relhasindex=ok relchecks=ok relhastriggers=ok relhasrules=ok relhassubclass=ok relnatts=ok atthasdef=ok",
		"constraint_index runs_occurrence_key CREATE UNIQUE INDEX runs_occurrence_key ON control_core.runs USING btree (project_id, trigger_id, scheduled_for_ms)",
		"table control_core.goose_db_version",
		"sequence goose_db_version_id_seq",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("readiness_contract.txt lacks %q", want)
		}
	}
	contract, err := readiness.Contract()
	if err != nil {
		t.Fatal(err)
	}
	tables := 0
	for _, f := range contract {
		if f.Kind == "table" {
			tables++
		}
	}
	if tables != 24 {
		t.Errorf("the contract lists %d tables, want the 23 of control-core v28 and goose's version table", tables)
	}
}

func TestReadinessDriftNamesTheObject(t *testing.T) {
	t.Parallel()
	contract, err := readiness.Contract()
	if err != nil {
		t.Fatal(err)
	}
	list, err := checksums.Load(migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	loc := readiness.NewLocator(migrations.FS, list)
	cases := []struct {
		name, sql, kind, object, fix string
	}{
		{"dropped column", "ALTER TABLE control_core.runs DROP COLUMN cancel_requested_at_ms",
			"missing_column", "control_core.runs.cancel_requested_at_ms", "pg-0006-runs"},
		{"nullability", "ALTER TABLE control_core.trigger_schedules ALTER COLUMN state_version DROP NOT NULL",
			"changed_column", "control_core.trigger_schedules.state_version", "SET NOT NULL"},
		{"type", "ALTER TABLE control_core.projects ALTER COLUMN revision TYPE integer",
			"changed_column", "control_core.projects.revision", "bigint not null"},
		{"dropped index", "DROP INDEX control_core.trigger_schedules_claim_idx",
			"missing_index", "control_core.trigger_schedules_claim_idx", "CREATE INDEX trigger_schedules_claim_idx"},
		{"dropped unique", "ALTER TABLE control_core.runs DROP CONSTRAINT runs_idempotency_key_key",
			"missing_constraint", "runs_idempotency_key_key on control_core.runs", "ADD CONSTRAINT runs_idempotency_key_key UNIQUE (project_id, idempotency_key)"},
		{"dropped check", "ALTER TABLE control_core.trigger_schedules DROP CONSTRAINT trigger_schedules_claim_fence_check",
			"missing_constraint", "trigger_schedules_claim_fence_check on control_core.trigger_schedules", "ADD CONSTRAINT trigger_schedules_claim_fence_check CHECK"},
		{"dropped table", "DROP TABLE control_core.project_plugin_bindings",
			"missing_table", "control_core.project_plugin_bindings", "pg-0018-plugin-packages"},
		{"dropped function", "DROP FUNCTION control_core.lock_project(text, text)",
			"missing_function", "control_core.lock_project(text, text)", "pg-0018-plugin-packages"},
		{"function made security definer", "ALTER FUNCTION control_core.db_now_ms() SECURITY DEFINER",
			"changed_security", "control_core.db_now_ms()", "ALTER FUNCTION control_core.db_now_ms() SECURITY INVOKER;"},
		{"indexes no longer maintained", "UPDATE pg_catalog.pg_class SET relhasindex = false WHERE oid = 'control_core.runs'::regclass",
			"changed_flags", "control_core.runs", "REINDEX TABLE control_core.runs;"},
		{"CHECKs no longer counted", "UPDATE pg_catalog.pg_class SET relchecks = 2 WHERE oid = 'control_core.runs'::regclass",
			"changed_flags", "control_core.runs", "SET relchecks = (SELECT count(*) FROM pg_catalog.pg_constraint"},
		{"primary key no longer primary", "UPDATE pg_catalog.pg_index SET indisprimary = false WHERE indexrelid = 'control_core.runs_pkey'::regclass",
			"changed_index_flags", "control_core.runs_pkey", "UPDATE pg_catalog.pg_index SET indisprimary = true WHERE indexrelid = 'control_core.runs_pkey'::pg_catalog.regclass;"},
		{"a key's index moved to other columns", "UPDATE pg_catalog.pg_index SET indkey = (SELECT pg_catalog.string_agg(attnum::text, ' ' ORDER BY attnum) FROM pg_catalog.pg_attribute WHERE attrelid = 'control_core.runs'::regclass AND attname IN ('project_id', 'task_id', 'task_revision'))::pg_catalog.int2vector WHERE indexrelid = 'control_core.runs_occurrence_key'::regclass",
			"changed_constraint_index", "runs_occurrence_key on control_core.runs",
			"ALTER TABLE control_core.runs DROP CONSTRAINT runs_occurrence_key, ADD CONSTRAINT runs_occurrence_key UNIQUE (project_id, trigger_id, scheduled_for_ms);"},
		{"a referenced key's index moved to another column", "UPDATE pg_catalog.pg_index SET indkey = (SELECT attnum::text FROM pg_catalog.pg_attribute WHERE attrelid = 'control_core.runs'::regclass AND attname = 'execution_revision_id')::pg_catalog.int2vector WHERE indexrelid = 'control_core.runs_pkey'::regclass",
			"changed_constraint_index", "runs_pkey on control_core.runs", "unnest(ARRAY['run_id']::text[])"},
		{"a column's default hidden from INSERT", "UPDATE pg_catalog.pg_attribute SET atthasdef = false WHERE attrelid = 'control_core.runs'::regclass AND attname = 'created_at_ms'",
			"changed_flags", "control_core.runs", "SET atthasdef = EXISTS (SELECT 1 FROM pg_catalog.pg_attrdef d"},
		{"goose's table made unlogged", "ALTER TABLE control_core.goose_db_version SET UNLOGGED",
			"changed_persistence", "control_core.goose_db_version", "ALTER TABLE control_core.goose_db_version SET LOGGED;"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := testpg.New(t)
			d.Exec(t, c.sql)
			drift := readiness.Compare(contract, readFacts(t, d), loc)
			var found []string
			for _, f := range drift {
				found = append(found, f.Kind+" "+f.Object)
				if f.Kind == c.kind && f.Object == c.object && !f.Note {
					if !strings.Contains(f.Fix, c.fix) {
						t.Errorf("fix %q does not contain %q", f.Fix, c.fix)
					}
					return
				}
			}
			t.Errorf("want drift %s %s, got %v", c.kind, c.object, found)
		})
	}
	t.Run("an extra view and type in the schema are notes", func(t *testing.T) {
		t.Parallel()
		d := testpg.New(t)
		d.Exec(t, "CREATE VIEW control_core.v AS SELECT 1 AS x; CREATE TYPE control_core.mood AS ENUM ('ok')")
		var got []string
		for _, f := range readiness.Compare(contract, readFacts(t, d), loc) {
			got = append(got, fmt.Sprintf("%s %s note=%v", f.Kind, f.Object, f.Note))
		}
		if want := []string{"extra_type control_core.mood note=true", "extra_view control_core.v note=true"}; !slices.Equal(got, want) {
			t.Errorf("want %v, got %v", want, got)
		}
	})
	t.Run("extra index is a note", func(t *testing.T) {
		t.Parallel()
		d := testpg.New(t)
		d.Exec(t, "CREATE INDEX runs_state_idx ON control_core.runs (state)")
		drift := readiness.Compare(contract, readFacts(t, d), loc)
		if len(drift) != 1 || !drift[0].Note || drift[0].Object != "control_core.runs_state_idx" {
			t.Errorf("want one note naming control_core.runs_state_idx, got %+v", drift)
		}
	})
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
