package console_test

import (
	"context"
	"encoding/json"
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
	// comments out first: one may hold a semicolon (none of these statements has "--" in a string)
	stmt, _, _ := strings.Cut(regexp.MustCompile(`(?m)--.*$`).ReplaceAllString(after, ""), ";")
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

// The overview's queue depth costs the queue, not the Runs' history: with 20,000 finished Runs
// and 5 queued in one project, its plan reads the runs table only through a range of queued Runs
// (the queue's partial index, or the state index at (project, 'queued')), no scan of runs returns
// more than the queue, and the buffers it touches are a few while the table holds hundreds of
// pages. The count stops at max_rows.
func TestQueueDepthReadsTheQueueNotTheHistory(t *testing.T) {
	t.Parallel()
	s := seed(t)
	s.d.Exec(t, `
		INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id, trigger_id,
		        trigger_revision, scheduled_for_ms, idempotency_key, state, owner, queued_at_ms, created_at_ms, updated_at_ms,
		        finished_at_ms)
		SELECT gen_random_uuid(), 'billing', 'job', 1, kr.execution_revision_id, NULL, NULL, NULL, 'history:' || g,
		       CASE WHEN g % 10 = 0 THEN 'failed' ELSE 'succeeded' END, 'runtime', x.at, x.at, x.at, x.at
		FROM generate_series(1, 20000) g
		CROSS JOIN LATERAL (SELECT control_core.db_now_ms() - 86400000 + g AS at) x
		JOIN control_core.task_revisions kr ON kr.project_id = 'billing' AND kr.task_id = 'job' AND kr.revision = 1;
		INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id,
		        idempotency_key, state, owner, queued_at_ms, created_at_ms, updated_at_ms)
		SELECT gen_random_uuid(), 'billing', 'job', 1, kr.execution_revision_id, 'queued:' || g, 'queued', 'runtime',
		       control_core.db_now_ms() - 60000 * g, control_core.db_now_ms() - 60000 * g, control_core.db_now_ms()
		FROM generate_series(1, 5) g
		JOIN control_core.task_revisions kr ON kr.project_id = 'billing' AND kr.task_id = 'job' AND kr.revision = 1`)
	s.d.Exec(t, `VACUUM ANALYZE control_core.runs`)
	pool := s.d.Pool(t, "ql_admin")
	ctx := context.Background()
	var pages int64
	if err := pool.QueryRow(ctx, `SELECT relpages FROM pg_class WHERE oid = 'control_core.runs'::regclass`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if pages < 200 {
		t.Fatalf("the runs table holds %d pages; the test wants a history far larger than the queue", pages)
	}
	for _, c := range []struct {
		maxRows       string
		billing, ops  int64
		wantOldestAgo int64 // ms, at least
	}{{"1000", 5, 0, 5 * 60000}, {"3", 3, 0, 5 * 60000}} {
		tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) //nolint:errcheck // read-only; after a Fatal too, or the pool's close waits for it
		if _, err := tx.Exec(ctx, "SELECT set_config('jit', 'off', true)"); err != nil {
			t.Fatal(err)
		}
		stmt := statement(t, "ConsoleQueueDepth", map[string]string{"max_rows": c.maxRows})
		var doc []byte
		if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+stmt).Scan(&doc); err != nil {
			t.Fatal(err)
		}
		var now int64
		if err := tx.QueryRow(ctx, "SELECT control_core.db_now_ms()").Scan(&now); err != nil {
			t.Fatal(err)
		}
		got := map[string][2]int64{}
		rows, err := tx.Query(ctx, stmt)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var p string
			var n, oldest int64
			if err := rows.Scan(&p, &n, &oldest); err != nil {
				t.Fatal(err)
			}
			got[p] = [2]int64{n, oldest}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		_ = tx.Rollback(ctx)
		if got["billing"][0] != c.billing || got["ops"] != [2]int64{c.ops, 0} {
			t.Errorf("max_rows %s: %v; want billing %d queued, ops none", c.maxRows, got, c.billing)
		}
		if age := now - got["billing"][1]; age < c.wantOldestAgo || age > c.wantOldestAgo+60000 {
			t.Errorf("max_rows %s: billing's queue head ready %d ms ago; want the oldest queued Run's, about %d", c.maxRows, age, c.wantOldestAgo)
		}

		var plan []struct {
			Plan planNode `json:"Plan"`
		}
		if err := json.Unmarshal(doc, &plan); err != nil || len(plan) != 1 {
			t.Fatalf("EXPLAIN JSON: %v\n%s", err, doc)
		}
		top := plan[0].Plan
		top.walk(func(n planNode) {
			if n.Relation != "runs" {
				return
			}
			if n.Index != "runs_dispatch_queue_idx" && n.Index != "runs_project_state_created_idx" {
				t.Errorf("max_rows %s: a %s of runs by %q; want a range of queued Runs\n%s", c.maxRows, n.Type, n.Index, doc)
			}
			if n.Rows > 5 {
				t.Errorf("max_rows %s: a %s of runs by %s returned %v rows a loop; want at most the 5 queued\n%s", c.maxRows, n.Type,
					n.Index, n.Rows, doc)
			}
		})
		if buffers := top.Hit + top.Read; buffers > 40 {
			t.Errorf("max_rows %s: %d buffers for a queue of 5 (the table holds %d pages)\n%s", c.maxRows, buffers, pages, doc)
		}
		t.Logf("max_rows %s: %d buffers, runs holds %d pages", c.maxRows, top.Hit+top.Read, pages)
	}
}

// planNode is one node of EXPLAIN (FORMAT JSON).
type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Hit      int64      `json:"Shared Hit Blocks"`
	Read     int64      `json:"Shared Read Blocks"`
	Rows     float64    `json:"Actual Rows"` // per loop
	Plans    []planNode `json:"Plans"`
}

func (n planNode) walk(fn func(planNode)) {
	fn(n)
	for _, c := range n.Plans {
		c.walk(fn)
	}
}
