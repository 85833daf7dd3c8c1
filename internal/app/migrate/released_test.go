package migrate_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/checksums"
	"github.com/qlcontrol/controlcore/internal/app/migrate"
	"github.com/qlcontrol/controlcore/internal/app/verify"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/readiness"
	"github.com/qlcontrol/controlcore/sql/migrations"
)

// stop43Stream is the stream as a database first migrated by the stop-43 release (f1634fb) ran
// it: pg-0001 … pg-0027 with the released texts of pg-0020, pg-0021 and pg-0023 (kept byte for
// byte in checksums/testdata/f1634fb) in place of today's; today's pg-0028 and pg-0029 not yet there.
func stop43Stream(t *testing.T) fstest.MapFS {
	t.Helper()
	stream := fstest.MapFS{}
	files, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if f >= "0028" {
			continue
		}
		body, err := fs.ReadFile(migrations.FS, f)
		if err != nil {
			t.Fatal(err)
		}
		stream[f] = &fstest.MapFile{Data: body}
	}
	old, err := filepath.Glob("../../../checksums/testdata/f1634fb/*.sql")
	if err != nil || len(old) != 3 {
		t.Fatalf("released texts: %v %v", old, err)
	}
	for _, p := range old {
		body, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := stream[filepath.Base(p)]; !ok {
			t.Fatalf("%s replaces no migration of the stream", p)
		}
		stream[filepath.Base(p)] = &fstest.MapFile{Data: body}
	}
	withSum(t, stream)
	return stream
}

// contractOf renders d's readiness facts (functions with their bodies, indexes, triggers,
// constraints, columns…) as the readiness contract is rendered.
func contractOf(t *testing.T, d *testpg.DB) []byte {
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
		t.Fatalf("read readiness facts: %v", err)
	}
	return readiness.RenderContract(facts)
}

func verifyAll(t *testing.T, d *testpg.DB) *verify.Report {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), d.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	rep, err := verify.Run(context.Background(), conn, verify.Options{Names: d.Names})
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	return rep
}

// A database first migrated by the stop-43 release: today's up applies pg-0028 and pg-0029, verify
// passes with one released_text note per released text (readiness and privileges included), and
// the schema is a fresh migration's. A ledger sha256 that is neither text is still drift.
func TestAStop43DatabaseUpgradesToTheSameSchemaAsAFreshOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.NewEmpty(t)
	if _, err := open(t, d, "", stop43Stream(t)).Up(ctx, 0); err != nil {
		t.Fatalf("up with the stop-43 texts: %v", err)
	}
	su := d.Pool(t, "")
	for _, r := range checksums.ReleasedTexts {
		if n := count(t, su, `SELECT count(*) FROM control_core.migration_ledger WHERE version = $1 AND sha256 = $2`, r.Version, r.SHA256); n != 1 {
			t.Fatalf("the ledger does not hold version %d as %s", r.Version, r.SHA256)
		}
	}
	fiveArg := `SELECT count(*) FROM pg_proc WHERE oid::regprocedure::text = 'control_core.retry_at_ms(text,integer,integer,bigint,bigint)'`
	if n := count(t, su, fiveArg); n != 0 {
		t.Fatalf("the stop-43 history still has the 5-argument retry_at_ms")
	}

	r := open(t, d, "", nil)
	applied, err := r.Up(ctx, 0)
	if err != nil {
		t.Fatalf("today's up on the stop-43 database: %v", err)
	}
	if len(applied) != 2 || applied[0].Migration.Name != "pg-0028-retry-contract-register-refusal" ||
		applied[1].Migration.Name != "pg-0029-pooled-plan-settings" {
		t.Fatalf("applied %v, want pg-0028-retry-contract-register-refusal and pg-0029-pooled-plan-settings", applied)
	}

	rep := verifyAll(t, d)
	notes := map[string]string{}
	for _, c := range rep.Checks {
		if c.Status != verify.StatusOK {
			t.Errorf("check %s: %s %+v", c.Name, c.Status, c.Findings)
		}
		for _, f := range c.Findings {
			if f.Kind == "released_text" {
				if f.Severity != verify.SeverityNote || c.Name != verify.CheckLedger {
					t.Errorf("released_text is not a ledger note: %+v", f)
				}
				notes[f.Object] = f.Message
			}
		}
	}
	if !rep.OK || len(notes) != 3 || !strings.Contains(notes["pg-0023-loop-integrity"], "pg-0028-retry-contract-register-refusal brings its schema to the same state") {
		t.Errorf("verify: ok %v, released notes %v", rep.OK, notes)
	}
	var text bytes.Buffer
	if err := verify.WriteText(&text, rep); err != nil || !strings.Contains(text.String(), "ran as an earlier released text") ||
		!strings.Contains(text.String(), "OK: no drift") {
		t.Errorf("verify's text: %v\n%s", err, text.String())
	}
	st, err := r.Status(ctx)
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if !st.Current() || st.Migrations[22].Checksum != migrate.ChecksumReleased || st.Migrations[22].Migration.Version != 23 {
		t.Errorf("status: current %v, pg-0023 %s; want current and %s", st.Current(), st.Migrations[22].Checksum, migrate.ChecksumReleased)
	}

	if got, want := contractOf(t, d), contractOf(t, testpg.New(t)); !bytes.Equal(got, want) {
		t.Errorf("the upgraded stop-43 schema differs from a fresh migration's:\n%s", lineDiff(want, got))
	}

	// Neither today's text nor the released one: still changed_checksum, and up refuses.
	d.Exec(t, "UPDATE control_core.migration_ledger SET sha256 = repeat('c', 64) WHERE version = 23")
	rep = verifyAll(t, d)
	var kinds []string
	for _, c := range rep.Checks {
		if c.Name == verify.CheckLedger {
			for _, f := range c.Findings {
				kinds = append(kinds, f.Kind+"/"+f.Object)
			}
		}
	}
	if rep.OK || !strings.Contains(strings.Join(kinds, " "), "changed_checksum/pg-0023-loop-integrity") {
		t.Errorf("a third sha256 of pg-0023: ok %v, ledger findings %v; want changed_checksum", rep.OK, kinds)
	}
	if v, err := open(t, d, "", nil).Validate(ctx); err != nil || v.OK {
		t.Errorf("up's validation with a third sha256 of pg-0023: %v, want drift and no error", err)
	}
}

// lineDiff lists the lines of want missing from got (-) and of got missing from want (+).
func lineDiff(want, got []byte) string {
	in := func(b []byte) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(string(b), "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var out []string
	for l := range w {
		if !g[l] {
			out = append(out, "- "+l)
		}
	}
	for l := range g {
		if !w[l] {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}
