package chaos

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// TestAuditOfAUniqueKeyedTable runs the audit on rows a real table holds, written the way the two
// systems write: River's ON CONFLICT (unique key) DO UPDATE, a DO NOTHING, and a plain INSERT
// whose unique violation fails its statement. The insert log counts the attempts the unique key
// turned away (attempts − rows); the failed statement leaves none, and the audit sees each
// occurrence once.
func TestAuditOfAUniqueKeyedTable(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, d.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE occ (key text NOT NULL, second_ms bigint NOT NULL, admitted_ms bigint NOT NULL,
		kind text NOT NULL, UNIQUE (key, second_ms))`); err != nil {
		t.Fatal(err)
	}
	if err := InstallInsertLog(ctx, conn, "occ", "NEW.kind = 'job'"); err != nil {
		t.Fatal(err)
	}
	upsert := `INSERT INTO occ VALUES ($1, $2, $3, 'job') ON CONFLICT (key, second_ms) DO UPDATE SET kind = occ.kind`
	for _, st := range []struct {
		sql     string
		args    []any
		wantErr bool
	}{
		{upsert, []any{"a", 10_000, 10_005}, false},
		{upsert, []any{"a", 11_000, 11_005}, false},
		{upsert, []any{"a", 11_000, 16_000}, false},                                                              // a resumed leader's late insert: refused, the first admission stays
		{"INSERT INTO occ VALUES ($1, $2, $3, 'job') ON CONFLICT DO NOTHING", []any{"a", 10_000, 12_000}, false}, // refused
		{upsert, []any{"a", 13_000, 14_500}, false},                                                              // late: 1.5 s
		{"INSERT INTO occ VALUES ($1, $2, $3, 'job')", []any{"a", 13_000, 15_000}, true},                         // 23505: rolled back, log too
		{"INSERT INTO occ VALUES ($1, $2, $3, 'other')", []any{"z", 10_000, 10_000}, false},                      // not logged (where)
	} {
		_, err := conn.Exec(ctx, st.sql, st.args...)
		if (err != nil) != st.wantErr {
			t.Fatalf("%s %v: err %v, want error %v", st.sql, st.args, err, st.wantErr)
		}
	}
	attempts, err := InsertAttempts(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, "SELECT key, second_ms, admitted_ms FROM occ WHERE kind = 'job'")
	if err != nil {
		t.Fatal(err)
	}
	adm, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Admission])
	if err != nil {
		t.Fatal(err)
	}
	if refused := attempts - int64(len(adm)); attempts != 5 || refused != 2 {
		t.Errorf("attempts %d, refused %d (rows %d); want 5 attempts, 2 refused", attempts, refused, len(adm))
	}
	got := Audit([]string{"a"}, Window{FromMs: 10_000, ToMs: 14_000}, adm)
	want := Result{Expected: 4, ExactlyOnce: 3, Missed: 1, Gaps: 1, GapsResumed: 1, LongestGapS: 1,
		LagP50Ms: 5, LagP99Ms: 1500, LagMaxMs: 1500, Within1s: 2, WithinGrace: 3, Ever: 3}
	if got != want {
		t.Errorf("Audit:\n got %+v\nwant %+v", got, want)
	}
}
