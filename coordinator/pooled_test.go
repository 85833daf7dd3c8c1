package coordinator

import (
	"context"
	"maps"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/internal/base/dbconn"
)

// openThrough opens the runtime role's handle through a PgBouncer of pool_mode mode in front of
// f's database, with query (a connection-string query, ql_pooler=… say) added to its URL.
//
// Transaction pooling gets one server session, so the plans are kept on it. Session pooling
// gives each client connection a server session of its own for the connection's life, so one
// server session served one of the handle's connections only: a second one (the store's
// wake-up sender reads WakeWanted on its own connection after the first admit, while the test
// claims again) waited for a server that never came free, until its response timeout, and the
// test failed when the sender took the idle connection first (once, under load).
func (f *fixture) openThrough(mode, query string) *dbconn.DB {
	f.t.Helper()
	size := "default_pool_size = 1"
	if mode == "session" {
		size = "default_pool_size = 20" // PgBouncer's default: a server session for every client connection the test makes
	}
	b := f.d.StartPgBouncer(f.t, mode, size)
	u := b.URL("ql_runtime")
	if query != "" {
		u += "&" + query
	}
	cfg, err := dbconn.Resolve(u)
	if err != nil {
		f.t.Fatal(err)
	}
	h, err := cfg.Open(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(h.Close)
	return h
}

// Behind a transaction pooler the claim and the admit go to the server as calls of pg-0027's
// functions (planned once per server session), with the same outcome as the statements
// directly: one Run, one Attempt, two Events, the cursor advanced, the claim cleared; a second
// claim finds nothing. With ql_pooler=session and directly the statements go as they are. Which
// path was taken is proved by renaming the functions: the transaction-pooled claim then fails
// naming claim_due, the others still claim.
func TestPooledClaimAndAdmitCallThePlannedFunctions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name, mode, query string
		calls             bool
	}{
		{"transaction pooling, detected", "transaction", "", true},
		{"transaction pooling, ql_pooler=transaction", "transaction", "ql_pooler=transaction", true},
		{"session pooling, ql_pooler=session", "session", "ql_pooler=session", false},
		{"direct", "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			h := f.rt
			if tc.mode != "" {
				h = f.openThrough(tc.mode, tc.query)
			}
			if h.PlansPerExecution() != tc.calls {
				t.Fatalf("PlansPerExecution = %v, want %v (pooled %v)", h.PlansPerExecution(), tc.calls, h.Pooled())
			}
			s := NewStore(h)
			f.dueOnce("a", "b")
			for range 2 {
				c, a, out := fireOnce(t, s, "r1")
				if out != Written || a.RunID == uuid.Nil || a.AttemptID == uuid.Nil || a.AdmittedAtMs < c.ClaimedAtMs {
					t.Fatalf("admit of %s: %s %+v", c.TriggerID, out, a)
				}
			}
			if c, err := s.Claim(ctx, "r1", 30*time.Second); err != nil || c != nil {
				t.Fatalf("a third claim: %+v, %v; want nothing to claim", c, err)
			}
			if n := f.audit(); n != 2 {
				t.Fatalf("audit: %d occurrences admitted exactly once, want 2", n)
			}

			f.exec(`ALTER FUNCTION control_core.claim_due(text, bigint, bigint, integer) RENAME TO claim_due_gone`)
			f.setCursor("a", -time.Second)
			_, err := s.Claim(ctx, "r1", 30*time.Second)
			if gone := err != nil && strings.Contains(err.Error(), "control_core.claim_due"); gone != tc.calls {
				t.Fatalf("claim with claim_due renamed: %v; want the function called: %v", err, tc.calls)
			}
		})
	}
}

// The pooled admit's fence is the statement's: a claim taken over before the admit writes
// nothing through the function and is diagnosed as a race, as directly.
func TestPooledAdmitUnderALostFenceIsARace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	s := NewStore(f.openThrough("transaction", ""))
	f.dueOnce("a")
	c := must(s.Claim(ctx, "r1", 30*time.Second)).of(t)
	f.expireClaim("a")
	if other := must(s.Claim(ctx, "r2", 30*time.Second)).of(t); other == nil {
		t.Fatal("the expired claim was not taken over")
	}
	if _, out, err := s.Admit(ctx, c, *c.CursorMs, *c.CursorMs+60_000, uuid.New(), 3); err != nil || out != Race {
		t.Fatalf("admit under a lost fence: %s, %v; want race", out, err)
	}
	if n := f.count(`SELECT count(*) FROM control_core.runs`); n != 0 {
		t.Fatalf("%d Runs written under a lost fence", n)
	}
}

// The bodies of pg-0027's functions are the claim's and the admit's statements as sqlc generates
// them, character for character (the migration's promise: the ADR's rules are the same behind
// a pooler). A change to scheduler.sql needs a new migration that replaces the function.
func TestPooledFunctionsAreTheGeneratedStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	body := regexp.MustCompile(`(?s)^\s*#variable_conflict use_column\s+BEGIN\s+RETURN QUERY\n(.*)\n;\s*END\s*$`)
	name := regexp.MustCompile(`^-- name: \w+ :batchmany\n+`)
	if len(pooledSQL) != 2 {
		t.Fatalf("pooledSQL maps %d statements, want the claim and the admit", len(pooledSQL))
	}
	for stmt, call := range pooledSQL {
		fn := regexp.MustCompile(`control_core\.(\w+)\(`).FindStringSubmatch(call)
		if fn == nil {
			t.Fatalf("no function call in %q", call)
		}
		var src string
		if err := f.su.QueryRow(ctx, `SELECT prosrc FROM pg_proc WHERE proname = $1
			AND pronamespace = 'control_core'::regnamespace`, fn[1]).Scan(&src); err != nil {
			t.Fatalf("%s: %v", fn[1], err)
		}
		m := body.FindStringSubmatch(src)
		if m == nil {
			t.Fatalf("control_core.%s: the body is not RETURN QUERY and one statement:\n%s", fn[1], src)
		}
		if want := strings.TrimSpace(name.ReplaceAllString(stmt, "")); m[1] != want {
			t.Errorf("control_core.%s runs another statement than the generated one:\n--- function\n%s\n--- generated\n%s", fn[1], m[1], want)
		}
	}
}

// pg-0029 gives pg-0027's functions the store's planner settings of their statements as their
// own (ALTER FUNCTION … SET), so that a statement's plan, made by the first call on a server
// session, is made under them whoever calls (TestPooledClaimPlanDoesNotDependOnTheServerSessionsFirstCaller):
// claim_due carries claimSettings, admit admitSettings, each exactly (beside pg-0027's
// search_path). A setting added to or changed in the store needs a migration that gives it to
// the function too.
func TestPooledFunctionsCarryTheStoresSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	setConfig := regexp.MustCompile(`set_config\('(\w+)', '([^']*)', true\)`)
	for fn, settings := range map[string]string{
		"control_core.claim_due(text, bigint, bigint, integer)": claimSettings,
		"control_core.admit(text[], text[], text[], text[], uuid[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], bigint[], text[], text[], text[], uuid[], text[], text[], bigint[], uuid[], bigint[], bigint[])": admitSettings,
	} {
		calls := setConfig.FindAllStringSubmatch(settings, -1)
		if len(calls) == 0 || len(calls) != strings.Count(settings, "set_config(") {
			t.Fatalf("the store's settings for %s: %q, read %d of them", fn, settings, len(calls))
		}
		want := map[string]string{"search_path": "pg_catalog"}
		for _, c := range calls {
			want[c[1]] = c[2]
		}
		var config []string
		if err := f.su.QueryRow(ctx, `SELECT coalesce(proconfig, '{}') FROM pg_proc WHERE oid = $1::regprocedure`, fn).Scan(&config); err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		got := map[string]string{}
		for _, c := range config {
			name, value, _ := strings.Cut(c, "=")
			got[name] = value
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s carries %v, want the store's settings %v and search_path", fn, config, want)
		}
	}
}
