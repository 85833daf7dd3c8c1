package migrate_test

import (
	"context"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/qlcontrol/controlcore/checksums"
	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/app/migrate"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/sql/migrations"
)

func TestMain(m *testing.M) { testpg.Main(m) }

func open(t *testing.T, d *testpg.DB, role string, fsys fs.FS) *migrate.Runner {
	t.Helper()
	r, err := migrate.Open(context.Background(), d.Config(t, role), migrate.Options{Names: d.Names, FS: fsys, AsOwner: true})
	if err != nil {
		t.Fatalf("open runner as %q: %v", role, err)
	}
	t.Cleanup(r.Close)
	return r
}

// withSum writes the integrity file of a test stream, which up checks before anything else.
func withSum(t *testing.T, stream fstest.MapFS) {
	t.Helper()
	delete(stream, checksums.SumFileName)
	sum, err := checksums.ComputeSum(stream)
	if err != nil {
		t.Fatal(err)
	}
	stream[checksums.SumFileName] = &fstest.MapFile{Data: sum.Bytes()}
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func TestUpAsSuperuserOwnsEverythingAndIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.NewEmpty(t)
	r := open(t, d, "", nil) // the superuser, which must SET ROLE ql_owner

	applied, err := r.Up(ctx, 0)
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	if len(applied) != 29 || applied[0].Migration.Name != "pg-0001-bootstrap" || applied[28].Migration.Name != "pg-0029-pooled-plan-settings" {
		t.Fatalf("applied %d migrations (%v …), want pg-0001-bootstrap … pg-0029-pooled-plan-settings", len(applied), applied)
	}
	capability, err := db.New(d.Pool(t, "")).Capability(ctx, "control-core")
	if err != nil || capability.Version != 28 || capability.Name != "pooled_plan_settings" {
		t.Fatalf("capability = %+v, %v; want v28 pooled_plan_settings", capability, err)
	}

	su := d.Pool(t, "")
	notOwned := count(t, su, `
		SELECT count(*) FROM (
		    SELECT relowner AS owner FROM pg_class WHERE relnamespace = 'control_core'::regnamespace
		    UNION ALL SELECT proowner FROM pg_proc WHERE pronamespace = 'control_core'::regnamespace
		    UNION ALL SELECT typowner FROM pg_type WHERE typnamespace = 'control_core'::regnamespace
		    UNION ALL SELECT nspowner FROM pg_namespace WHERE nspname = 'control_core') o
		WHERE owner <> 'ql_owner'::regrole`)
	if notOwned != 0 {
		t.Errorf("%d objects in control_core are not owned by ql_owner", notOwned)
	}
	if n := count(t, su, "SELECT count(*) FROM pg_class WHERE relnamespace = 'control_core'::regnamespace AND relkind = 'r'"); n != 24 {
		t.Errorf("control_core has %d tables, want 24 (23 of the model + goose's version table)", n)
	}

	again, err := r.Up(ctx, 0)
	if err != nil || len(again) != 0 {
		t.Fatalf("second up applied %d, err %v; want nothing", len(again), err)
	}
	st, err := r.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Migrations {
		if !s.Applied || s.Checksum != migrate.ChecksumOK {
			t.Errorf("%s: applied=%v checksum=%s, want applied with checksum ok", s.Migration.Name, s.Applied, s.Checksum)
		}
	}
}

func TestUpToStopsThereAndStatusShowsPending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.NewEmpty(t)
	r := open(t, d, "ql_owner", nil)
	if _, err := r.Up(ctx, 14); err != nil {
		t.Fatal(err)
	}
	capability, err := db.New(d.Pool(t, "")).Capability(ctx, "control-core")
	if err != nil || capability.Version != 13 || capability.Name != "cluster_scheduler_admission" {
		t.Fatalf("after --to 14: capability %+v, %v; want v13 cluster_scheduler_admission", capability, err)
	}
	st, err := r.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Migrations {
		if want := s.Migration.Version <= 14; s.Applied != want {
			t.Errorf("%s applied=%v, want %v", s.Migration.Name, s.Applied, want)
		}
	}
	var field *migrate.FieldError
	if _, err := r.Up(ctx, 99); !errors.As(err, &field) || field.Field != "To" || !strings.Contains(err.Error(), "the stream has versions 1 … 29") {
		t.Errorf("Up(ctx, 99): err %v, want a *FieldError of field To saying which versions exist", err)
	}
}

func TestStatusReportsAnEditedLedgerChecksum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.New(t)
	d.Exec(t, "UPDATE control_core.migration_ledger SET sha256 = repeat('0', 64), normalized_sha256 = repeat('0', 64) WHERE version = 5")
	d.Exec(t, "UPDATE control_core.migration_ledger SET sha256 = repeat('0', 64) WHERE version = 6")
	r := open(t, d, "ql_owner", nil)
	st, err := r.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.Migrations {
		want := migrate.ChecksumOK
		switch s.Migration.Version {
		case 5:
			want = migrate.ChecksumChanged
		case 6:
			want = migrate.ChecksumCosmetic
		}
		if s.AppliedBy == "" || s.Duration < 0 {
			t.Errorf("%s: applied by %q, duration %s; want the session user and a duration", s.Migration.Name, s.AppliedBy, s.Duration)
		}
		if s.Checksum != want {
			t.Errorf("%s checksum %s, want %s", s.Migration.Name, s.Checksum, want)
		}
	}
}

// A migration that fails halfway leaves neither its schema change nor its version or ledger row;
// the migrations before it stay applied.
func TestFailedMigrationLeavesNoPartialChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	stream := fstest.MapFS{}
	for _, f := range []string{"0001_bootstrap.sql", "0002_projects.sql"} {
		body, err := fs.ReadFile(migrations.FS, f)
		if err != nil {
			t.Fatal(err)
		}
		stream[f] = &fstest.MapFile{Data: body}
	}
	stream["0003_breaks_halfway.sql"] = &fstest.MapFile{Data: []byte(`-- +goose Up
CREATE TABLE control_core.half_done (x integer PRIMARY KEY);
INSERT INTO control_core.half_done VALUES (1);
ALTER TABLE control_core.projects ADD COLUMN half_done integer;
SELECT 1 / 0;
`)}
	withSum(t, stream)
	d := testpg.NewEmpty(t)
	r := open(t, d, "ql_owner", stream)
	applied, err := r.Up(ctx, 0)
	if err == nil || !strings.Contains(err.Error(), "pg-0003-breaks-halfway failed") || !strings.Contains(err.Error(), "division by zero") {
		t.Fatalf("up: err %v, want pg-0003-breaks-halfway failed with division by zero", err)
	}
	if len(applied) != 2 {
		t.Errorf("applied %d before the failure, want 2", len(applied))
	}
	su := d.Pool(t, "")
	for _, c := range []struct {
		what, sql string
		want      int
	}{
		{"table half_done", "SELECT count(*) FROM pg_class WHERE relname = 'half_done'", 0},
		{"column projects.half_done", "SELECT count(*) FROM pg_attribute WHERE attrelid = 'control_core.projects'::regclass AND attname = 'half_done'", 0},
		{"goose version 3", "SELECT count(*) FROM control_core.goose_db_version WHERE version_id = 3", 0},
		{"goose versions 1-2", "SELECT count(*) FROM control_core.goose_db_version WHERE version_id IN (1, 2)", 2},
		{"ledger rows", "SELECT count(*) FROM control_core.migration_ledger", 2},
	} {
		if got := count(t, su, c.sql); got != c.want {
			t.Errorf("%s: %d, want %d", c.what, got, c.want)
		}
	}
}

// A "-- +goose NO TRANSACTION" migration runs its statements in autocommit on goose's locked
// connection and then records itself there: the version row and the ledger row must still commit
// together (one transaction of the ledger store's own), never one without the other.
func TestNonTransactionalMigrationRecordsVersionAndLedgerTogether(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, body string
		wantErr    []string // empty: the migration applies
		versions   int      // goose rows for version 3
		ledger     string   // the ledger's name for version 3, "" for none
	}{
		{
			// CREATE INDEX CONCURRENTLY fails inside a transaction block: that it applies proves
			// goose ran the file outside one.
			name:     "applies with both rows",
			body:     "-- +goose NO TRANSACTION\n-- +goose Up\nCREATE INDEX CONCURRENTLY IF NOT EXISTS projects_state_no_tx_idx ON control_core.projects (state);\n",
			versions: 1, ledger: "pg-0003-no-tx",
		},
		{
			// The migration takes the ledger row of its own version, so the ledger insert that
			// follows goose's version insert fails: the version row must roll back with it.
			name:     "a failed ledger row takes the version row with it",
			body:     "-- +goose NO TRANSACTION\n-- +goose Up\nINSERT INTO control_core.migration_ledger (version, name, sha256, normalized_sha256, applied_at_ms, duration_ms) VALUES (3, 'pg-0003-squatter', repeat('0', 64), repeat('0', 64), 1, 0);\n",
			wantErr:  []string{"pg-0003-no-tx failed", "NO TRANSACTION", "may have been applied", "duplicate key"},
			versions: 0, ledger: "pg-0003-squatter",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			stream := fstest.MapFS{}
			for _, f := range []string{"0001_bootstrap.sql", "0002_projects.sql"} {
				body, err := fs.ReadFile(migrations.FS, f)
				if err != nil {
					t.Fatal(err)
				}
				stream[f] = &fstest.MapFile{Data: body}
			}
			stream["0003_no_tx.sql"] = &fstest.MapFile{Data: []byte(c.body)}
			withSum(t, stream)
			d := testpg.NewEmpty(t)
			r := open(t, d, "ql_owner", stream)
			applied, err := r.Up(ctx, 0)
			if len(c.wantErr) == 0 {
				if err != nil || len(applied) != 3 {
					t.Fatalf("up: applied %d, err %v; want 3 and no error", len(applied), err)
				}
			} else {
				if err == nil {
					t.Fatalf("up: no error, want one saying %q", c.wantErr)
				}
				for _, w := range c.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("up: err %q, want it to say %q", err, w)
					}
				}
			}
			su := d.Pool(t, "")
			if got := count(t, su, "SELECT count(*) FROM control_core.goose_db_version WHERE version_id = 3"); got != c.versions {
				t.Errorf("goose version rows for 3: %d, want %d", got, c.versions)
			}
			var name string
			err = su.QueryRow(ctx, "SELECT coalesce((SELECT name FROM control_core.migration_ledger WHERE version = 3), '')").Scan(&name)
			if err != nil || name != c.ledger {
				t.Errorf("ledger row for 3: %q, %v; want %q", name, err, c.ledger)
			}
			if c.ledger == "pg-0003-no-tx" {
				want := r.Migrations[2].SHA256
				if got := count(t, su, "SELECT count(*) FROM control_core.migration_ledger WHERE version = 3 AND sha256 = $1", want); got != 1 {
					t.Errorf("ledger row for 3 does not hold the file's sha256 %s", want)
				}
			}
		})
	}
}
