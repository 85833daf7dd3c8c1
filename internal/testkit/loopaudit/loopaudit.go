// Package loopaudit checks the closed loop's invariants over a whole database (issue 32, design
// §6): what must hold after any interleaving of placements, ACKs, heartbeats, completions,
// sweeps and cancels. Store tests run it at their end; the process gates run it after the
// faults. It reads through any querier (a superuser or runtime connection) and writes nothing.
//
// The invariants are one query, LoopAuditChecks (sql/queries/loop_audit.sql), the same the
// demo's execution audit prints (admin.Reader.LoopAudit).
package loopaudit

import (
	"context"
	"fmt"
	"testing"

	"github.com/qlcontrol/controlcore/db"
)

// Querier is what the audit reads through (a *pgxpool.Pool, *pgx.Conn or pgx.Tx).
type Querier = db.DBTX

// Violations returns one line per broken invariant ("name: n rows"); none when all hold.
func Violations(ctx context.Context, q Querier) ([]string, error) {
	checks, err := db.New(q).LoopAuditChecks(ctx)
	if err != nil {
		return nil, fmt.Errorf("loop audit: %w", err)
	}
	if len(checks) == 0 {
		return nil, fmt.Errorf("loop audit: no invariant checked")
	}
	var out []string
	for _, c := range checks {
		if c.Violations != 0 {
			out = append(out, fmt.Sprintf("%s: %d rows break it", c.CheckName, c.Violations))
		}
	}
	return out, nil
}

// Assert fails t with every broken invariant.
func Assert(t testing.TB, q Querier) {
	t.Helper()
	v, err := Violations(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range v {
		t.Errorf("loop audit: %s", line)
	}
}
