package main

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/testkit/drifttest"
)

// Every class of catalog change that alters behaviour (issue 16, points 1 and 2) fails verify,
// naming the object, and the script `verify --fix-sql` prints, run as a superuser, makes verify
// pass again.
func TestVerifyCatchesEveryDriftClassAndItsFixSQLRemovesIt(t *testing.T) {
	t.Parallel()
	for _, c := range drifttest.Cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			d := c.DB(t)
			d.Exec(t, c.Render(d.Name, d.Names))
			args := []string{"verify", "--role-prefix", d.Names.Prefix, "--database-url", d.URL("")}
			r := run(t, nil, args...)
			if r.code != 1 || !strings.Contains(r.stdout, c.Object) {
				t.Fatalf("verify: exit %d, want 1 naming %q\n%s%s", r.code, c.Object, r.stdout, r.stderr)
			}
			fix := run(t, nil, append(args, "--fix-sql")...)
			if fix.code != 1 || !strings.Contains(fix.stdout, "BEGIN;\n") || !strings.Contains(fix.stdout, "COMMIT;\n") {
				t.Fatalf("verify --fix-sql: exit %d, want 1 and one transaction\n%s%s", fix.code, fix.stdout, fix.stderr)
			}
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, d.URL(""))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			// The simple protocol runs the script as psql -f would: statements, BEGIN and COMMIT.
			if _, err := conn.Exec(ctx, fix.stdout, pgx.QueryExecModeSimpleProtocol); err != nil {
				t.Fatalf("run the fix: %v\n%s", err, fix.stdout)
			}
			if r := run(t, nil, args...); r.code != 0 {
				t.Fatalf("verify after the fix: exit %d, want 0\nfix:\n%s\nverify:\n%s%s", r.code, fix.stdout, r.stdout, r.stderr)
			}
		})
	}
}
