package limits_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/base/limits"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

func TestMain(m *testing.M) { testpg.Main(m) }

// prober stores one value into one column of a copy of a control_core table that keeps the CHECK
// constraints on that column alone (no keys, no CHECK over several columns, every column
// nullable). It answers what the migrated database itself accepts for the column.
type prober struct {
	t    *testing.T
	conn *pgx.Conn
}

func newProber(t *testing.T) *prober {
	t.Helper()
	d := testpg.New(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, d.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return &prober{t: t, conn: conn}
}

func (p *prober) accepts(table, column, value string) bool {
	p.t.Helper()
	ctx := context.Background()
	tx, err := p.conn.Begin(ctx)
	if err != nil {
		p.t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	copyOf := "probe_" + table
	if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TEMP TABLE %s (LIKE control_core.%s INCLUDING CONSTRAINTS) ON COMMIT DROP`, copyOf, table)); err != nil {
		p.t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(`DO $$ DECLARE c text; BEGIN
		FOR c IN SELECT attname FROM pg_attribute WHERE attrelid = '%[1]s'::regclass AND attnum > 0 AND attnotnull LOOP
			EXECUTE format('ALTER TABLE %[1]s ALTER COLUMN %%I DROP NOT NULL', c);
		END LOOP;
		FOR c IN SELECT conname FROM pg_constraint WHERE conrelid = '%[1]s'::regclass AND contype = 'c'
		        AND conkey <> ARRAY[(SELECT attnum FROM pg_attribute WHERE attrelid = '%[1]s'::regclass AND attname = '%[2]s')] LOOP
			EXECUTE format('ALTER TABLE %[1]s DROP CONSTRAINT %%I', c);
		END LOOP; END $$`, copyOf, column)); err != nil {
		p.t.Fatal(err)
	}
	cast := ""
	if table == "execution_revisions" {
		cast = "::jsonb"
	}
	_, err = tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (%s) VALUES ($1::text%s)`, copyOf, column, cast), value)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return true
	case errors.As(err, &pgErr) && (pgErr.Code == "23514" || strings.HasPrefix(pgErr.Code, "22") || pgErr.Code == "54001"):
		return false // check_violation, data exceptions (invalid json, numeric overflow, encoding), stack depth
	}
	p.t.Fatalf("probe %s.%s: %v", table, column, err)
	return false
}

// TestBoundsAgreeWithTheDatabase checks every Go bound against the migrated database's own
// constraints, on both sides of each boundary: whatever Go accepts the database stores, and at
// each shared boundary the longest value Go accepts is stored and the next one refused by both.
// Where Go is stricter on purpose (printable ASCII cron specs, depth, size), the test says so.
func TestBoundsAgreeWithTheDatabase(t *testing.T) {
	t.Parallel()
	p := newProber(t)
	type probe struct {
		value    string
		goStrict bool // Go refuses a value the database would store, on purpose
	}
	agree := func(t *testing.T, table, column string, goAccepts func(string) bool, cases []probe) {
		t.Helper()
		for _, c := range cases {
			db, g := p.accepts(table, column, c.value), goAccepts(c.value)
			show := c.value
			if len(show) > 40 {
				show = fmt.Sprintf("%.40s… (%d bytes)", show, len(show))
			}
			switch {
			case g && !db:
				t.Errorf("%s.%s: Go accepts %q, the database refuses it", table, column, show)
			case !g && db && !c.goStrict:
				t.Errorf("%s.%s: Go refuses %q, the database stores it (a bound that disagrees)", table, column, show)
			case c.goStrict && g:
				t.Errorf("%s.%s: %q marked Go-strict, but Go accepts it", table, column, show)
			}
		}
	}
	ok := func(err error) bool { return err == nil }

	t.Run("identifiers", func(t *testing.T) {
		longest := "a" + strings.Repeat("b", limits.MaxID-1)
		cases := []probe{{value: "a"}, {value: "0"}, {value: longest}, {value: longest + "c"}, {value: ""}, {value: "A"},
			{value: "-a"}, {value: "_a"}, {value: "a b"}, {value: "a\n"}, {value: "é"}, {value: "a.b"}, {value: "a-b_c9"}}
		for _, col := range [][2]string{{"projects", "project_id"}, {"tasks", "task_id"}, {"triggers", "trigger_id"}} {
			agree(t, col[0], col[1], func(v string) bool { return ok(limits.CheckID("x", v)) }, cases)
		}
		if !p.accepts("projects", "project_id", longest) || p.accepts("projects", "project_id", longest+"c") {
			t.Errorf("the database's identifier bound is not %d characters", limits.MaxID)
		}
	})
	t.Run("cron spec", func(t *testing.T) {
		longest := strings.Repeat("*", limits.MaxCronSpec)
		agree(t, "trigger_revisions", "cron_spec", func(v string) bool { return ok(limits.CheckCronSpec(v)) }, []probe{
			{value: "* * * * *"}, {value: longest}, {value: longest + "*"}, {value: ""},
			{value: "0 3 * * * ", goStrict: true}, {value: " 0 3 * * *", goStrict: true}, {value: "0\t3 * * *", goStrict: true},
			{value: strings.Repeat("é", limits.MaxCronSpec), goStrict: true}, {value: strings.Repeat("é", limits.MaxCronSpec+1)},
		})
	})
	t.Run("time zone", func(t *testing.T) {
		longest := strings.Repeat("A", limits.MaxTimeZone)
		agree(t, "trigger_revisions", "timezone", func(v string) bool { return ok(limits.CheckTimeZone(v)) }, []probe{
			{value: "UTC"}, {value: "America/Argentina/ComodRivadavia"}, {value: longest}, {value: longest + "A"}, {value: ""},
			{value: "Europe/Berlin ", goStrict: true}, // the database stores it; no zone has that name
		})
	})
	t.Run("claim owner", func(t *testing.T) {
		longest := "o" + strings.Repeat("x", limits.MaxOwner-1)
		owner := func(v string) bool {
			c := coordinator.DefaultConfig(v)
			return ok(c.Validate())
		}
		agree(t, "trigger_schedules", "claim_owner", owner, []probe{
			{value: "host-1"}, {value: longest}, {value: longest + "x"}, {value: ""}, {value: "has space", goStrict: true},
		})
	})
	t.Run("executor spec", func(t *testing.T) {
		nest := func(n int) string { return `{"a":` + strings.Repeat("[", n-1) + strings.Repeat("]", n-1) + `}` }
		cases := []probe{
			{value: `{}`}, {value: `{"image":"x"}`}, {value: `[1]`}, {value: `"s"`}, {value: `{"a":1`}, {value: `{"a":1}x`},
			{value: `{"a":"\u0000"}`}, {value: `{"a":"x\u0000y"}`}, {value: `{"a":"\\u0000"}`}, {value: `{"\u0000":1}`},
			{value: `{"a":"\ud800"}`}, {value: `{"a":"\udc00"}`}, {value: `{"a":"\ud800x"}`}, {value: `{"a":"\ud800\ud800"}`},
			{value: `{"a":"\udc00\ud800"}`}, {value: `{"a":"\ud83d\ude00"}`}, {value: `{"a":"\uD83D\uDE00"}`}, {value: `{"a":"\u00e9\n"}`},
			{value: `{"a":1e131071}`}, {value: `{"a":10e131071}`}, {value: `{"a":0.1e131072}`}, {value: `{"a":0.01e131073}`},
			{value: `{"a":1.5e131071}`}, {value: `{"a":-1e131071}`}, {value: `{"a":1e131072}`}, {value: `{"a":1e-16383}`},
			{value: `{"a":1e-16384}`}, {value: `{"a":0e-16383}`}, {value: `{"a":0e-16384}`}, {value: `{"a":0.0e131072}`},
			{value: `{"a":100e-16385}`}, {value: `{"a":0.5e-16383}`}, {value: `{"a":1E+5}`}, {value: `{"a":-0}`},
			{value: `{"a":1e99999999999999999999}`}, {value: `{"a":1e-99999999999999999999}`}, {value: `{"a":12345678901234567890e131052}`},
			{value: nest(limits.MaxSpecDepth)}, {value: nest(limits.MaxSpecDepth + 1), goStrict: true},
			{value: `{"a":"` + strings.Repeat("x", limits.MaxExecutorSpec-8) + `"}`},
			{value: `{"a":"` + strings.Repeat("x", limits.MaxExecutorSpec-7) + `"}`, goStrict: true}, // 64 KiB + 1
			{value: "{\"a\":\"\xff\"}"}, {value: "\ufeff{}"}, {value: "{\"a\":\"\x01\"}"},
			// jsonb keeps a duplicate key's last value; Go refuses what would be lost unseen
			{value: `{"a":1,"a":2}`, goStrict: true}, {value: `{"x":[{"a":1, "a" :2}]}`, goStrict: true},
			{value: `{"a":{"a":1},"b":{"a":1}}`}, {value: `{"a":[{"b":1},{"b":1}],"b":[]}`}, {value: `{"a":"a","b":"a"}`},
		}
		agree(t, "execution_revisions", "spec", func(v string) bool { return ok(limits.CheckExecutorSpec([]byte(v))) }, cases)
	})
}
