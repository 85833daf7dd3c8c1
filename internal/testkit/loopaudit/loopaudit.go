// Package loopaudit checks the closed loop's invariants over a whole database (issue 32, design
// §6): what must hold after any interleaving of placements, ACKs, heartbeats, completions,
// sweeps and cancels. Store tests run it at their end; the process gates run it after the
// faults. It reads through any querier (a superuser or runtime connection) and writes nothing.
package loopaudit

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Querier is what the audit reads through (a *pgxpool.Pool, *pgx.Conn, pgx.Tx or dbconn.Querier).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// checks are the invariants, each a query counting the rows that break it.
var checks = []struct{ name, sql string }{
	{"at most one active lease per Run", `
		SELECT count(*) FROM (SELECT run_id FROM control_core.run_leases WHERE state = 'active'
		                      GROUP BY run_id HAVING count(*) > 1) x`},
	{"leases of one Run never overlap", `
		SELECT count(*) FROM control_core.run_leases a JOIN control_core.run_leases b
		  ON a.run_id = b.run_id AND a.run_lease_id < b.run_lease_id
		WHERE a.granted_at_ms < coalesce(b.ended_at_ms, 9223372036854775807)
		  AND b.granted_at_ms < coalesce(a.ended_at_ms, 9223372036854775807)`},
	{"at most one succeeded Attempt per Run", `
		SELECT count(*) FROM (SELECT run_id FROM control_core.attempts WHERE state = 'succeeded'
		                      GROUP BY run_id HAVING count(*) > 1) x`},
	{"every Run's newest Attempt agrees with it", `
		SELECT count(*) FROM control_core.runs r
		JOIN LATERAL (SELECT a.state FROM control_core.attempts a WHERE a.run_id = r.run_id
		              ORDER BY a.attempt_no DESC LIMIT 1) n ON true
		WHERE NOT control_core.run_attempt_states_agree(r.state, n.state)`},
	{"no older Attempt is live", `
		SELECT count(*) FROM control_core.attempts a
		WHERE a.state IN ('claimed', 'dispatching', 'running')
		  AND EXISTS (SELECT 1 FROM control_core.attempts b WHERE b.run_id = a.run_id AND b.attempt_no > a.attempt_no)`},
	{"a running Attempt holds the Run's active lease", `
		SELECT count(*) FROM control_core.attempts a
		WHERE a.state = 'running' AND NOT EXISTS (SELECT 1 FROM control_core.run_leases l
		          WHERE l.run_lease_id = a.run_lease_id AND l.state = 'active' AND l.run_id = a.run_id)`},
	{"a dispatching Attempt holds a live offer", `
		SELECT count(*) FROM control_core.attempts a
		WHERE a.state = 'dispatching' AND NOT EXISTS (SELECT 1 FROM control_core.dispatch_offers o
		          WHERE o.offer_id = a.offer_id AND o.state = 'offered' AND o.attempt_id = a.attempt_id)`},
	{"event seqs contiguous from 1", `
		SELECT count(*) FROM (SELECT run_id FROM control_core.run_events GROUP BY run_id
		                      HAVING min(seq) <> 1 OR max(seq) <> count(*)) x`},
	{"every terminal Run has finished_at_ms", `
		SELECT count(*) FROM control_core.runs
		WHERE state IN ('succeeded', 'failed', 'cancelled') AND finished_at_ms IS NULL`},
	{"a Run's last event names its state", `
		SELECT count(*) FROM control_core.runs r
		JOIN LATERAL (SELECT e.type FROM control_core.run_events e WHERE e.run_id = r.run_id
		              ORDER BY e.seq DESC LIMIT 1) e ON true
		WHERE e.type <> 'run.' || r.state AND e.type <> 'run.recovery_failed'`},
}

// Violations returns one line per broken invariant ("name: n rows"); none when all hold.
func Violations(ctx context.Context, q Querier) ([]string, error) {
	var out []string
	for _, c := range checks {
		rows, err := q.Query(ctx, c.sql)
		if err != nil {
			return nil, fmt.Errorf("loop audit %q: %w", c.name, err)
		}
		n, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[int64])
		if err != nil {
			return nil, fmt.Errorf("loop audit %q: %w", c.name, err)
		}
		if n != 0 {
			out = append(out, fmt.Sprintf("%s: %d rows break it", c.name, n))
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
