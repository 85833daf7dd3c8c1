package verify_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/app/pgcluster"
	"github.com/qlcontrol/controlcore/internal/app/verify"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/roles"
)

// ALTER SYSTEM changes every database of the server, so this runs on a server of its own: a
// session_replication_role = replica from postgresql.auto.conf is drift naming that file, in the
// scope `qlmigrate up` checks too, and the fix script resets it outside its transaction.
func TestSettingsFromAlterSystemNameTheirSource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		t.Skipf("no server of its own: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	url := c.URL("postgres", "postgres")
	admin := connect(t, url)
	if _, err := admin.Exec(ctx, "ALTER SYSTEM SET session_replication_role = replica"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	names, _ := roles.NewNames(roles.DefaultPrefix)
	check := func() (*verify.Report, []verify.Finding) {
		rep, err := verify.Run(ctx, connect(t, url), verify.Options{Names: names, Scope: verify.ScopeUp})
		if err != nil {
			t.Fatal(err)
		}
		var drift []verify.Finding
		for _, c := range rep.Checks {
			for _, f := range c.Findings {
				if c.Name == verify.CheckSettings && f.Severity == verify.SeverityDrift {
					drift = append(drift, f)
				}
			}
		}
		return rep, drift
	}
	var rep *verify.Report
	var drift []verify.Finding
	eventually.True(t, 10*time.Second, "a new session sees the reloaded configuration", func() bool {
		rep, drift = check()
		return len(drift) > 0
	})
	f := drift[0]
	if len(drift) != 1 || f.Object != "session_replication_role" ||
		!strings.Contains(f.Message, "session_replication_role = replica from postgresql.auto.conf (ALTER SYSTEM)") ||
		strings.Join(f.SQL, " ") != `ALTER SYSTEM RESET "session_replication_role"; SELECT pg_catalog.pg_reload_conf();` {
		t.Fatalf("settings findings: %+v", drift)
	}
	var b bytes.Buffer
	if err := verify.WriteFixSQL(&b, rep); err != nil {
		t.Fatal(err)
	}
	script := b.String()
	if strings.Contains(script, "BEGIN;") || !strings.Contains(script, "ALTER SYSTEM cannot run inside a transaction block") {
		t.Fatalf("fix script, want ALTER SYSTEM outside any transaction:\n%s", script)
	}
	for _, stmt := range f.SQL { // one by one, as psql -f sends them
		if _, err := admin.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	eventually.True(t, 10*time.Second, "verify finds no settings drift after the fix", func() bool {
		_, drift = check()
		return len(drift) == 0
	})
}

// A direct connection pins the transaction defaults at start, over the database's settings; behind
// a pooler (where startup parameters do not reach the server) the session keeps the database's,
// and the settings check refuses them, naming the database as their source.
func TestTransactionDefaultsPinnedDirectAndRefusedBehindAPooler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.New(t)
	d.Exec(t, "ALTER DATABASE "+pgx.Identifier{d.Name}.Sanitize()+" SET default_transaction_isolation = 'serializable'")
	d.Exec(t, "ALTER DATABASE "+pgx.Identifier{d.Name}.Sanitize()+" SET default_transaction_read_only = on")
	for _, pooled := range []bool{false, true} {
		cfg := d.Config(t, d.Names.Runtime)
		if pooled {
			cfg.SetPooled()
		}
		conn, err := cfg.Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(ctx) })
		var readOnly, isolation string
		if err := conn.QueryRow(ctx, "SELECT current_setting('default_transaction_read_only'), current_setting('default_transaction_isolation')").Scan(&readOnly, &isolation); err != nil {
			t.Fatal(err)
		}
		rep, err := verify.Run(ctx, conn, verify.Options{Names: d.Names, Scope: verify.ScopeRuntime})
		if err != nil {
			t.Fatal(err)
		}
		var found []string
		for _, c := range rep.Checks {
			for _, f := range c.Findings {
				if c.Name == verify.CheckSettings && f.Severity == verify.SeverityDrift {
					found = append(found, f.Message)
				}
			}
		}
		switch {
		case !pooled && (readOnly != "off" || isolation != "read committed" || len(found) != 0):
			t.Errorf("direct: read only %s, isolation %s, settings drift %q; want pinned and none", readOnly, isolation, found)
		case pooled && (readOnly != "on" || len(found) != 2 ||
			!strings.Contains(strings.Join(found, "\n"), "default_transaction_read_only = on from the database (ALTER DATABASE … SET)")):
			t.Errorf("pooled: read only %s, settings drift %q; want the database's values refused with their source", readOnly, found)
		}
	}
}
