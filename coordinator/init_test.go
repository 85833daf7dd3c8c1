package coordinator

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/schedule"
)

// bulkUninitialised adds n enabled every-minute triggers u1 … un to project p whose schedule rows
// wait for initialisation, as a mass publish leaves them.
// bulkUninitialised makes n every-minute triggers waiting for their first cursor, once the
// database's minute has 20 s or more left: a round initialises them to the next minute, and one
// that crossed the boundary found them due again (CI, under load: a single-mode round claimed 14
// of them one by one, spending its budget, and the test's counts failed).
func (f *fixture) bulkUninitialised(n int) {
	f.t.Helper()
	eventually.True(f.t, 30*time.Second, "20 s or more left of the database's minute", func() bool {
		var ms int64
		if err := f.su.QueryRow(context.Background(), `SELECT control_core.db_now_ms()`).Scan(&ms); err != nil {
			f.t.Fatal(err)
		}
		return ms%60_000 <= 40_000
	})
	f.bulk("u", n, "NULL")
}

func (f *fixture) uninitialised() int {
	f.t.Helper()
	return f.count(`SELECT count(*) FROM control_core.trigger_schedules WHERE next_fire_at_ms IS NULL`)
}

// One round initialises a whole mass publish in a few statements, without spending its budget,
// and still admits the running trigger that is due in the same database. Before batch
// initialisation a round claimed its budget (16) of the waiting rows, one statement each, and
// admitted nothing.
func TestARoundInitialisesABatchAndAdmitsTheDueTrigger(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{1, 8, 16} { // single mode and --admit-batch, up to the whole budget
		t.Run(fmt.Sprintf("admit_batch_%d", batch), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.bulkUninitialised(300)
			f.trigger("running", "* * * * * *", schedule.MisfireSkip)
			cursor := f.setCursor("running", -500*time.Millisecond)
			var batches, claimedInBatches int
			observe := Observer{Init: func(_ time.Duration, claimed, _ int) { batches, claimedInBatches = batches+1, claimedInBatches+claimed }}
			c := f.coordinatorWith("r1", f.rt, []Option{WithObserver(observe)},
				func(cfg *Config) { cfg.AdmitBatch, cfg.InitBatch, cfg.InitBudget = batch, 100, 1000 })
			claimed := c.Round(context.Background(), nil)
			if n := f.uninitialised(); n != 0 {
				t.Errorf("%d rows still wait for initialisation after one round; want 0", n)
			}
			st := c.Stats.Snapshot()
			// The round's first claim reaches the waiting rows (first in the order) and ends them as
			// before, one by one; the rest go in batches of 100.
			if st.Inits != 300 || st.Releases != 300 || batches != 3 || claimedInBatches != 300-batch {
				t.Errorf("inits %d, releases %d, %d batches claiming %d; want 300, 300 (initialisations are releases), 3 batches claiming %d",
					st.Inits, st.Releases, batches, claimedInBatches, 300-batch)
			}
			// The running trigger's due occurrence got its Run in the same round (and its next
			// one too if it fell due meanwhile), and the round's budget counts only those claims:
			// no waiting row spends it, not even those the first claim took.
			if n := f.count(`SELECT count(*) FROM control_core.runs WHERE trigger_id = 'running' AND scheduled_for_ms = $1`, cursor); n != 1 || st.Admits < 1 || int64(claimed) != st.Admits {
				t.Errorf("running trigger: %d runs for its due occurrence, %d admits, round claimed %d; want 1, and as many claims as admits", n, st.Admits, claimed)
			}
			if st.Claims != 300+st.Admits || st.Races != 0 || st.Errors != 0 {
				t.Errorf("claims %d, races %d, errors %d; want 300 + admits, 0, 0", st.Claims, st.Races, st.Errors)
			}
			// Every first cursor is Next(claim's observation): the next minute, after the row's
			// updated_at_ms, and each row's state moved by exactly one claim and one write.
			if n := f.count(`SELECT count(*) FROM control_core.trigger_schedules WHERE trigger_id LIKE 'u%'
				AND (next_fire_at_ms % 60000 <> 0 OR next_fire_at_ms <= updated_at_ms OR next_fire_at_ms > updated_at_ms + 60000
				     OR state_version <> 3 OR claim_token IS NOT NULL)`); n != 0 {
				t.Errorf("%d initialised rows without a first cursor within the minute after their claim, state_version 3 and no claim", n)
			}
			f.audit()
		})
	}
}

// A round that reaches its initialisation bound with rows still waiting claims its due rows past
// them (the amendment of the ADR's order, docs/scheduling.md): the running trigger is admitted in
// that round, not after the whole publish.
func TestARoundPastItsInitBudgetStillAdmitsDueRows(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.bulkUninitialised(300)
	f.trigger("running", "* * * * * *", schedule.MisfireSkip)
	f.setCursor("running", -500*time.Millisecond)
	c := f.coordinator("r1", f.rt, func(cfg *Config) { cfg.InitBatch, cfg.InitBudget = 50, 100 })
	claimed := c.Round(context.Background(), nil)
	st := c.Stats.Snapshot()
	if st.Inits != 101 || st.Admits < 1 || int64(claimed) != st.Admits {
		t.Errorf("inits %d, admits %d, round claimed %d; want 101 (the first claim's row and the bound), the running trigger's occurrence(s), as many claims as admits",
			st.Inits, st.Admits, claimed)
	}
	if n := f.uninitialised(); n != 199 {
		t.Errorf("%d rows wait for initialisation; want 199", n)
	}
	// The next rounds finish the publish, still within its bound each.
	for range 3 {
		c.Round(context.Background(), nil)
	}
	if st := c.Stats.Snapshot(); f.uninitialised() != 0 || st.Inits != 300 {
		t.Errorf("after four rounds: %d rows wait, %d inits; want 0, 300", f.uninitialised(), st.Inits)
	}
}

// ClaimInit takes only rows waiting for initialisation (a due row is ClaimDue's), none held by a
// live claim, and InitClaimed writes each row only under its own fence: a row whose claim was
// taken over, reset by a republish, expired, or whose first cursor is not after the claim writes
// nothing and is reported not written, while the others of the batch are written.
func TestInitialiseWritesEachRowUnderItsOwnFence(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		lease time.Duration // of the test's claim; 0: 30 s
		spoil func(f *fixture, s *Store, c *Claim, it *InitItem)
		want  []bool // written, for a, b, c; nil: a and c, not b
	}{
		{"taken_over_after_expiry", 0, func(f *fixture, s *Store, c *Claim, _ *InitItem) {
			f.expireClaim(c.TriggerID)
			got := must(s.ClaimInit(context.Background(), "other", 30*time.Second, 10)).of(f.t)
			if len(got) != 1 || got[0].TriggerID != c.TriggerID || !got[0].Takeover {
				f.t.Fatalf("the other replica's claim took %d rows; want the expired one", len(got))
			}
		}, nil},
		// The lease ran out by itself: owner, token, version, state and updated_at_ms all still
		// match the rows, only database time passed the expiry.
		{"expired_by_time_alone", 300 * time.Millisecond, func(f *fixture, _ *Store, c *Claim, _ *InitItem) {
			f.waitForDatabaseTimePast(c.Fence.ExpiresAtMs)
		}, []bool{false, false, false}},
		{"republished", 0, func(f *fixture, _ *Store, c *Claim, _ *InitItem) {
			if _, err := f.admin.PublishTrigger(context.Background(), admin.TriggerSpec{Project: "p", Trigger: c.TriggerID, Task: "task",
				Cron: "*/5 * * * *", TimeZone: "UTC", Misfire: schedule.MisfireSkip, Enabled: true}); err != nil {
				f.t.Fatal(err)
			}
		}, nil},
		{"first_cursor_not_after_the_claim", 0, func(_ *fixture, _ *Store, c *Claim, it *InitItem) { it.First = c.ClaimedAtMs }, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newFixture(t)
			for _, id := range []string{"a", "b", "c"} {
				f.trigger(id, "* * * * *", schedule.MisfireSkip)
			}
			f.trigger("due", "* * * * *", schedule.MisfireSkip)
			f.setCursor("due", -time.Second)
			s := NewStore(f.rt)
			lease := tc.lease
			if lease == 0 {
				lease = 30 * time.Second
			}
			claims := must(s.ClaimInit(ctx, "r1", lease, 10)).of(t)
			if len(claims) != 3 {
				t.Fatalf("ClaimInit took %d rows; want the 3 waiting for initialisation, not the due one", len(claims))
			}
			for i, c := range claims {
				if c.CursorMs != nil || c.TriggerID != []string{"a", "b", "c"}[i] {
					t.Fatalf("claim %d: %s with cursor %v; want a, b, c in order, uninitialised", i, c.TriggerID, c.cursorAttr())
				}
			}
			if again := must(s.ClaimInit(ctx, "r2", 30*time.Second, 10)).of(t); len(again) != 0 {
				t.Fatalf("a second ClaimInit took %d rows held by live claims", len(again))
			}
			items := make([]InitItem, len(claims))
			for i, c := range claims {
				items[i] = InitItem{Claim: c, First: (c.ClaimedAtMs/60000 + 1) * 60000}
			}
			lost := claims[1] // b
			before := f.count(`SELECT state_version FROM control_core.trigger_schedules WHERE trigger_id = 'b'`)
			tc.spoil(f, s, lost, &items[1])
			after := f.count(`SELECT state_version FROM control_core.trigger_schedules WHERE trigger_id = 'b'`)
			want := tc.want
			if want == nil {
				want = []bool{true, false, true}
			}
			written := must(s.Initialise(ctx, items)).of(t)
			for i, id := range []string{"a", "b", "c"} {
				n := f.count(`SELECT count(*) FROM control_core.trigger_schedules WHERE trigger_id = $1
					AND next_fire_at_ms IS NOT NULL AND claim_token IS NULL`, id)
				if written[i] != want[i] || (n == 1) != want[i] {
					t.Errorf("%s: reported written %v, initialised in the database %v; want %v", id, written[i], n == 1, want[i])
				}
			}
			if n := f.count(`SELECT count(*) FROM control_core.trigger_schedules WHERE trigger_id = 'b'
				AND next_fire_at_ms IS NULL AND state_version = $1`, after); n != 1 {
				t.Errorf("b was written although its fence was lost (state_version %d before the loss, %d after)", before, after)
			}
		})
	}
}

// Two coordinators initialising the same mass publish at once never initialise a row twice:
// every row ends with one first cursor, state_version moved by exactly one claim and one write,
// and the two replicas' initialisations add up to the rows.
func TestTwoCoordinatorsInitialiseConcurrentlyEachRowOnce(t *testing.T) {
	t.Parallel()
	const rows = 3000
	f := newFixture(t)
	f.bulkUninitialised(rows)
	cs := []*Coordinator{
		f.coordinator("r1", f.rt, func(cfg *Config) { cfg.InitBatch, cfg.InitBudget = 100, 400 }),
		f.coordinator("r2", f.d.Handle(t, "ql_runtime"), func(cfg *Config) { cfg.InitBatch, cfg.InitBudget = 100, 400 }),
	}
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rows / 400 * 2 { // enough rounds for either replica to do it alone
				c.Round(context.Background(), nil)
			}
		}()
	}
	wg.Wait()
	a, b := cs[0].Stats.Snapshot(), cs[1].Stats.Snapshot()
	if a.Inits+b.Inits != rows || a.Inits == 0 || b.Inits == 0 {
		t.Errorf("inits %d + %d; want %d in all, from both replicas", a.Inits, b.Inits, rows)
	}
	if a.Errors+b.Errors != 0 {
		t.Errorf("errors %d + %d", a.Errors, b.Errors)
	}
	if n := f.count(`SELECT count(*) FROM control_core.trigger_schedules
		WHERE next_fire_at_ms IS NULL OR state_version <> 3 OR claim_token IS NOT NULL`); n != 0 {
		t.Errorf("%d rows not initialised exactly once (state_version 3: one claim, one write) or still claimed", n)
	}
}

// ClaimInit's generic plan, with sorting allowed (hotSettings: the store's claimSettings also
// rule the sort out, and the statement's own form must not need that), walks the claim's index in
// order and stops at its LIMIT, whether the statistics have seen the rows
// waiting for initialisation or not (right after a mass publish, before autoanalyze, they say
// none wait). With the constant -1 instead of a parameter the planner chose a bitmap scan and a
// sort of every waiting row, for every batch.
func TestClaimInitWalksTheClaimIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	f.bulkSchedules(50_000, 3600, 600) // analysed with no row waiting
	f.d.Exec(t, `SET session_replication_role = replica;
		INSERT INTO control_core.triggers (project_id, trigger_id, head_revision)
		    SELECT 'p', 'u' || g, 1 FROM generate_series(1, 20000) g;
		INSERT INTO control_core.trigger_revisions (project_id, trigger_id, revision, kind, cron_spec, timezone,
		        misfire_policy, misfire_grace_ms, enabled, task_id, task_revision, content_digest)
		    SELECT 'p', 'u' || g, 1, 'cron', '* * * * *', 'UTC', 'skip', 60000, true, 'task', 1, repeat('a', 64)
		    FROM generate_series(1, 20000) g;
		INSERT INTO control_core.trigger_schedules (project_id, trigger_id, trigger_revision, next_fire_at_ms,
		        state_version, claim_version, updated_at_ms)
		    SELECT 'p', 'u' || g, 1, NULL, 1, 0, control_core.db_now_ms() FROM generate_series(1, 20000) g;`)
	for _, analysed := range []bool{false, true} {
		if analysed {
			f.exec(`ANALYZE control_core.trigger_schedules`)
		}
		func() {
			conn := must(f.rt.Pool().Acquire(ctx)).of(t)
			defer conn.Release() // before a failure's cleanup closes the pool
			if _, err := conn.Exec(ctx, "PREPARE claim_init AS "+testpg.Query(t, "ClaimInit")); err != nil {
				t.Error(err)
				return
			}
			defer func() { _, _ = conn.Exec(ctx, "ROLLBACK; DEALLOCATE claim_init") }()
			if _, err := conn.Exec(ctx, "BEGIN; "+hotSettings); err != nil {
				t.Error(err)
				return
			}
			// below_key, max_rows, owner, lease_ms
			rows, err := conn.Query(ctx, "EXPLAIN EXECUTE claim_init(0, 1000, 'explain', 30000)")
			if err != nil {
				t.Error(err)
				return
			}
			lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if plan := strings.Join(lines, "\n"); err != nil || !walksClaimIndex(plan) {
				t.Errorf("analysed %v: ClaimInit does not walk trigger_schedules_claim_idx in order (%v):\n%s", analysed, err, plan)
			}
		}()
	}
}
