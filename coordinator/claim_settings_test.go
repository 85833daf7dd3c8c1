package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/base/dbconn"
)

// scatteredBacklog is TestClaimWalksItsIndexOverAScatteredBacklog's backlog: 30,000 rows due at
// two cursors a minute apart, one row in five at the older one, interleaved in the heap (the
// every-minute backlog the replicas leave), ANALYZEd.
func scatteredBacklog(f *fixture) {
	f.bulk("t", 30_000, "control_core.db_now_ms() - 60000 - (g % 5 = 0)::int * 60000")
}

// pooledClaimPages runs the pooled claim (control_core.claim_due, pg-0027) on conn in a
// transaction that first runs settings, as a transaction-pooled pipeline sends it (the settings,
// then the call), under EXPLAIN (ANALYZE, BUFFERS), rolled back, and returns the pages it touched
// (the function's nested statement included).
func pooledClaimPages(t *testing.T, conn *pgx.Conn, settings string, fromKey, rows int) float64 {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.Exec(ctx, "ROLLBACK") }()
	if _, err := conn.Exec(ctx, settings); err != nil {
		t.Fatal(err)
	}
	var plan []byte
	if err := conn.QueryRow(ctx, fmt.Sprintf(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
		SELECT * FROM control_core.claim_due('explain', 30000, %d, %d)`, fromKey, rows)).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var doc []struct {
		Plan map[string]any `json:"Plan"`
	}
	if err := json.Unmarshal(plan, &doc); err != nil {
		t.Fatal(err)
	}
	root := doc[0].Plan
	return root["Shared Hit Blocks"].(float64) + root["Shared Read Blocks"].(float64)
}

// claimPagesBound is what a claim of at most 128 rows that walks trigger_schedules_claim_idx
// touches on the scattered backlog, with room: a walk touched about 1,150 pages at 1 row and
// 3,400-3,700 at 128 (the first call's compile and planning included), the scan and sort of the
// whole due range about 122,000 at either.
const claimPagesBound = 10_000

// The pooled claim (behind a transaction pooler: control_core.claim_due, planned once per server
// session) walks its index over a scattered backlog too, as the statement does
// (TestClaimWalksItsIndexOverAScatteredBacklog, which EXPLAINs the statement only): the plan of
// the function's statement is made in the first claim's transaction on a server session, under
// claimSettings, and kept. Measured in pages (claimPagesBound), since EXPLAIN does not show a
// function's plan. Without enable_sort off in claimSettings (mutation claim-may-sort) every case
// here touches the whole range (about 122,000 pages).
func TestPooledClaimWalksItsIndexOverAScatteredBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	scatteredBacklog(f)
	for _, fromKey := range []int{-1, 0} { // the ADR's whole order; past the uninitialised rows
		// a new server session for each: its first call plans the function's statement
		conn := must(pgx.Connect(ctx, f.d.URL("ql_runtime"))).of(t)
		for _, rows := range []int{1, 128} {
			pages := pooledClaimPages(t, conn, claimSettings, fromKey, rows)
			t.Logf("pooled claim (from_key %d, %d rows): %.0f pages", fromKey, rows, pages)
			if pages > claimPagesBound {
				t.Errorf("pooled claim (from_key %d, %d rows): %.0f pages, want at most %d (a walk of trigger_schedules_claim_idx)",
					fromKey, rows, pages, claimPagesBound)
			}
		}
		_ = conn.Close(ctx)
	}
}

// Review 48's finding, fixed by pg-0029: the pooled claim's plan is the one made by the first call
// of control_core.claim_due on a server session after each invalidation (an ANALYZE of a table it
// reads, autoanalyze included), and it is kept for every later call on that server session
// whatever their settings. Behind a transaction pooler server sessions are shared and outlive
// clients: during a rolling upgrade across 56c05d4 (or with any replica of an older build, or a
// DBA's call, on the same pool) a server session whose claim_due was planned without enable_sort
// off kept the scan and sort of the whole due range (120,617 pages and ~160-180 ms a claim here,
// 300-630 ms in bench-pooler) for the new replicas' claims too. pg-0029 gives the function its
// own settings (claimSettings'), which apply while its statement is planned, whoever calls: an
// older replica's claim (hotSettings only) first, then the store's, both walk the index.
func TestPooledClaimPlanDoesNotDependOnTheServerSessionsFirstCaller(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	scatteredBacklog(f)
	conn := must(pgx.Connect(ctx, f.d.URL("ql_runtime"))).of(t)
	defer func() { _ = conn.Close(ctx) }()
	if pages := pooledClaimPages(t, conn, hotSettings, -1, 1); pages > claimPagesBound { // an older replica's claim on this server session
		t.Errorf("pooled claim under hotSettings only (an older replica's) as the server session's first: %.0f pages, want at most %d",
			pages, claimPagesBound)
	}
	if pages := pooledClaimPages(t, conn, claimSettings, -1, 1); pages > claimPagesBound {
		t.Fatalf("pooled claim under claimSettings after an older replica's claim on the server session: %.0f pages, want at most %d",
			pages, claimPagesBound)
	}
}

// claimSettings are transaction-local: after the claims, the next transaction on the same server
// session plans with the session's own settings (enable_sort, plan_cache_mode and jit as before
// the claims). Behind a transaction pooler with one server session, where every client's
// transactions share it: the init claim (a statement), the pooled claim (the function) and a
// claim that fails after its settings ran (claim_due renamed) leave nothing behind.
func TestClaimSettingsEndWithTheClaimsTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	h := f.openThrough("transaction", "")
	s := NewStore(h)
	f.dueOnce("a", "b")
	f.bulk("u", 3, "NULL") // waiting for initialisation
	settings := func() string {
		t.Helper()
		var got string
		if err := h.Run(ctx, func(q dbconn.Querier) error {
			return q.QueryRow(ctx, `SELECT current_setting('enable_sort') || ' ' || current_setting('plan_cache_mode')
				|| ' ' || current_setting('jit') || ' ' || current_setting('join_collapse_limit')`).Scan(&got)
		}); err != nil {
			t.Fatal(err)
		}
		return got
	}
	before := settings()
	if before[:3] != "on " {
		t.Fatalf("the server session's settings before any claim: %q, want enable_sort on", before)
	}
	if c := must(s.ClaimInit(ctx, "r1", 30*time.Second, 10)).of(t); len(c) != 3 {
		t.Fatalf("init claim: %d rows, want 3", len(c))
	}
	if got := settings(); got != before {
		t.Fatalf("after the init claim: %q, want %q", got, before)
	}
	if c := must(s.ClaimBatch(ctx, "r1", 30*time.Second, 10)).of(t); len(c) != 2 {
		t.Fatalf("pooled claim: %d rows, want 2", len(c))
	}
	if got := settings(); got != before {
		t.Fatalf("after the pooled claim: %q, want %q", got, before)
	}
	f.exec(`ALTER FUNCTION control_core.claim_due(text, bigint, bigint, integer) RENAME TO claim_due_gone`)
	if _, err := s.ClaimBatch(ctx, "r1", 30*time.Second, 10); err == nil {
		t.Fatal("a claim with claim_due renamed did not fail")
	}
	if got := settings(); got != before {
		t.Fatalf("after a claim that failed: %q, want %q", got, before)
	}
}
