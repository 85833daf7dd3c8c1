package console_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// explain logs EXPLAIN ANALYZE of one statement of sql/queries/console.sql, console_loop.sql or status.sql (the
// per-project reads the overview shares with `qlsched status`) with the given values
// for its parameters (sqlc.narg: NULL unless given), so the benchmark's log shows the plan each
// page's statements take at the benchmark's size (QL_CONSOLE_BENCH_EXPLAIN=1).
func explain(b *testing.B, pool *pgxpool.Pool, name string, values map[string]string) {
	b.Helper()
	stmt := statement(b, name, values)
	// as the console runs it: a READ ONLY transaction without JIT (admin's consoleSnapshot)
	ctx := context.Background()
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		b.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	if _, err := tx.Exec(ctx, "SELECT set_config('jit', 'off', true)"); err != nil {
		b.Fatal(err)
	}
	// twice: the first run reads what it needs (cold, timed per node); the second, as a page
	// rendered again finds it, without per-node timing (its clock calls cost more than the work on
	// a VM with a slow clock source): only the summary and the buffers
	for _, run := range []struct{ label, options string }{
		{"", "ANALYZE, BUFFERS"},
		{" (again, TIMING OFF)", "ANALYZE, BUFFERS, TIMING OFF, SUMMARY ON"},
	} {
		rows, err := tx.Query(ctx, "EXPLAIN ("+run.options+") "+stmt)
		if err != nil {
			b.Fatalf("explain %s: %v", name, err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				b.Fatal(err)
			}
			plan = append(plan, line)
		}
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
		b.Logf("%s%s:\n%s", name, run.label, strings.Join(plan, "\n"))
	}
}

// statement is the text of one statement of console.sql, console_loop.sql or status.sql, with
// the given values for its parameters (sqlc.narg: NULL unless given).
func statement(tb testing.TB, name string, values map[string]string) string {
	tb.Helper()
	var src []byte
	for _, f := range []string{"console.sql", "console_loop.sql", "status.sql"} {
		s, err := os.ReadFile("../../../sql/queries/" + f)
		if err != nil {
			tb.Fatal(err)
		}
		src = append(src, s...)
	}
	_, after, ok := strings.Cut(string(src), "-- name: "+name+" ")
	if !ok {
		tb.Fatalf("console.sql, console_loop.sql and status.sql have no statement %s", name)
	}
	_, after, _ = strings.Cut(after, "\n") // the rest of the name line: ":many"
	stmt, _, _ := strings.Cut(after, ";")
	stmt = regexp.MustCompile(`sqlc\.narg\((\w+)\)`).ReplaceAllStringFunc(stmt, func(m string) string {
		if v, ok := values[m[len("sqlc.narg("):len(m)-1]]; ok {
			return v
		}
		return "NULL"
	})
	return regexp.MustCompile(`@(\w+)`).ReplaceAllStringFunc(stmt, func(m string) string {
		v, ok := values[m[1:]]
		if !ok {
			tb.Fatalf("%s: no value for %s", name, m)
		}
		return v
	})
}
