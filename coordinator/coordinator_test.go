package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/schedule"
)

func TestConfigBounds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		mutate func(*Config)
		field  string
	}{
		{"defaults", func(*Config) {}, ""},
		{"budget 0", func(c *Config) { c.Budget = 0 }, "Budget"},
		{"budget 257", func(c *Config) { c.Budget = 257 }, "Budget"},
		{"budget 256", func(c *Config) { c.Budget = 256 }, ""},
		{"lease 0", func(c *Config) { c.Lease = 0 }, "Lease"},
		{"lease under 2 x cadence", func(c *Config) { c.Cadence = 10 * time.Second; c.Lease = 15 * time.Second }, "Lease"},
		{"cadence 5ms", func(c *Config) { c.Cadence = 5 * time.Millisecond }, "Cadence"},
		{"cadence 2m", func(c *Config) { c.Cadence = 2 * time.Minute; c.Lease = 5 * time.Minute }, "Cadence"},
		{"drain 0", func(c *Config) { c.DrainTimeout = 0 }, "DrainTimeout"},
		{"drain 11m", func(c *Config) { c.DrainTimeout = 11 * time.Minute }, "DrainTimeout"},
		{"owner with a space", func(c *Config) { c.Owner = "a b" }, "Owner"},
		{"owner empty", func(c *Config) { c.Owner = "" }, "Owner"},
		{"backoff cap under the cadence", func(c *Config) { c.Cadence, c.BackoffCap = 2*time.Second, time.Second }, "BackoffCap"},
		{"backoff cap equal to the cadence", func(c *Config) { c.BackoffCap = c.Cadence }, ""},
		{"backoff cap 11m", func(c *Config) { c.BackoffCap = 11 * time.Minute }, "BackoffCap"},
		{"backoff cap 10m", func(c *Config) { c.BackoffCap = 10 * time.Minute }, ""},
		{"not ready after 0", func(c *Config) { c.NotReadyAfter = 0 }, "NotReadyAfter"},
		{"not ready after 101", func(c *Config) { c.NotReadyAfter = 101 }, "NotReadyAfter"},
		{"not ready after 1", func(c *Config) { c.NotReadyAfter = 1 }, ""},
	}
	for _, tc := range cases {
		cfg := DefaultConfig("replica-1")
		tc.mutate(&cfg)
		err := cfg.Validate()
		var ce *ConfigError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: %v, want valid", tc.name, err)
		case tc.field != "" && (!errors.As(err, &ce) || ce.Field != tc.field || strings.Contains(err.Error(), "--")):
			t.Errorf("%s: %v, want a ConfigError naming the field %s (and no flag)", tc.name, err, tc.field)
		}
	}
}

func TestRoundHonoursTheBudgetAndTheHardCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	// due once each (dueOnce: not due again while the test runs). Rows waiting for
	// initialisation would not do: their batch initialisation spends no budget.
	ids := make([]string, 300)
	for i := range ids {
		ids[i] = fmt.Sprintf("t%03d", i)
	}
	f.dueOnce(ids...)
	small := f.coordinator("r1", f.rt, func(c *Config) { c.Budget = 5 })
	if n := small.Round(ctx, nil); n != 5 {
		t.Errorf("budget 5 claimed %d", n)
	}
	big := f.coordinator("r2", f.rt, func(c *Config) { c.Budget = MaxBudget })
	if n := big.Round(ctx, nil); n != MaxBudget {
		t.Errorf("budget %d claimed %d", MaxBudget, n)
	}
	// 300 - 5 - 256 = 39 left for the next round
	if n := big.Round(ctx, nil); n != 39 {
		t.Errorf("third round claimed %d, want the remaining 39", n)
	}
	// a round that claims its whole budget is a saturated round; the one that found 39 is not
	if s, b := small.Stats.Saturated.Load(), big.Stats.Saturated.Load(); s != 1 || b != 1 {
		t.Errorf("saturated rounds: budget 5 %d, budget %d %d; want 1 and 1 (of 1 and 2 rounds)", s, MaxBudget, b)
	}
	if bad := DefaultConfig("x"); func() bool { bad.Budget = MaxBudget + 1; return bad.Validate() == nil }() {
		t.Error("budget above the hard cap validated")
	}
}

// A round claims its next batch while the batch before it is being admitted: with the first
// batch's admit held on a locked table, the second batch is claimed all the same, and nothing
// more (the budget). Released, both batches are admitted, each occurrence once.
func TestRoundClaimsTheNextBatchWhileAdmitting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	f.dueOnce("t0", "t1", "t2", "t3", "t4", "t5")
	blocker := must(f.su.Begin(ctx)).of(t)
	defer blocker.Rollback(ctx)
	if _, err := blocker.Exec(ctx, "LOCK TABLE control_core.run_events IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	co := f.coordinator("r1", f.rt, func(c *Config) { c.Budget, c.AdmitBatch = 4, 2 })
	done := make(chan int)
	go func() { done <- co.Round(ctx, nil) }()
	eventually.True(t, 30*time.Second, "the second batch claimed while the first admit waits", func() bool {
		return f.count(`SELECT count(*) FROM control_core.trigger_schedules WHERE claim_owner = 'r1'`) == 4
	})
	if n := f.count("SELECT count(*) FROM control_core.runs"); n != 0 {
		t.Fatalf("%d runs while the admit waits on the lock", n)
	}
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := <-done; n != 4 {
		t.Errorf("round claimed %d, want its budget 4", n)
	}
	if st := co.Stats.Snapshot(); st.Claims != 4 || st.Admits != 4 {
		t.Errorf("%+v; want 4 claims and 4 admits", st)
	}
	if n := f.audit(); n != 4 {
		t.Errorf("%d runs, want 4", n)
	}
}

// In batch mode a claim sent ahead that comes back short asks once more after the batch before
// it: that batch's rows were held while it ran, and are due again once admitted (every-second
// triggers 5 s late, within their grace, catch up one occurrence per claim).
func TestABatchRoundAsksAgainAfterAShortClaimAhead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	for _, id := range []string{"s0", "s1", "s2"} {
		if _, err := f.admin.PublishTrigger(ctx, admin.TriggerSpec{Project: "p", Trigger: id, Task: "task", Cron: "* * * * * *",
			TimeZone: "UTC", Misfire: schedule.MisfireSkip, MisfireGrace: 10 * time.Second, Enabled: true}); err != nil {
			t.Fatal(err)
		}
	}
	f.exec(`UPDATE control_core.trigger_schedules SET next_fire_at_ms = control_core.db_now_ms() / 1000 * 1000 - 5000,
		state_version = state_version + 1 WHERE project_id = 'p'`)
	co := f.coordinator("r1", f.rt, func(c *Config) { c.Budget, c.AdmitBatch = 64, 2 })
	// two rows, then the third alone (the two held), then the two again: without the second
	// ask the round ended after 3 claims
	if n := co.Round(ctx, nil); n < 6 {
		t.Errorf("the round claimed %d rows; want the late triggers' later occurrences too (at least 6)", n)
	}
	f.audit()
}

// A claim that fails ends the round, counted: the round does not wait for a claim it has already
// received (it did, forever, when its pool was gone).
func TestAFailedClaimEndsTheRound(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pool := f.d.Handle(t, "ql_runtime")
	pool.Close()
	co := f.coordinator("r1", pool)
	done := make(chan int)
	go func() { done <- co.Round(context.Background(), nil) }()
	select {
	case n := <-done:
		if st := co.Stats.Snapshot(); n != 0 || st.Errors != 1 {
			t.Errorf("claimed %d, %+v; want 0 claimed and 1 error", n, st)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the round did not end 30 s after its claim failed")
	}
}

// A saturated batch-mode round under a Lifecycle sends the next round's first claim while it
// admits its last batch (docs/performance.md, The round boundary: every
// other claim otherwise overlapped nothing, budget 256 and batch 128), and a Stop in between
// finishes that claim instead of leaving its rows to expire. Fails without the claim ahead (no row
// is claimed while the last admit is held) and without finishAhead (4 admits, 2 claims expiring).
func TestASaturatedRoundClaimsTheNextRoundsFirstBatchWhileAdmitting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	f.dueOnce("t0", "t1", "t2", "t3", "t4", "t5")
	inLast, release := make(chan struct{}), make(chan struct{})
	var admits atomic.Int32
	co := f.coordinatorWith("r1", f.rt, []Option{WithObserver(Observer{AdmitCall: func(time.Duration) {
		if admits.Add(1) == 2 { // the round's second and last batch (budget 4, batch 2), written
			close(inLast)
			<-release
		}
	}})}, func(c *Config) { c.Budget, c.AdmitBatch = 4, 2 })
	lc := NewLifecycle(co, co.cfg)
	var clock atomic.Int64 // every reading an hour later: each round has overrun the cadence
	lc.now = func() time.Time { return time.Unix(clock.Add(3600), 0) }
	if err := lc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inLast:
	case <-time.After(30 * time.Second):
		t.Fatal("the first round did not reach its second admit")
	}
	eventually.True(t, 10*time.Second, "the next round's first batch claimed while the last admit is held", func() bool {
		return f.count(`SELECT count(*) FROM control_core.trigger_schedules WHERE claim_owner = 'r1'`) == 2
	})
	stopped := make(chan error, 1)
	go func() { stopped <- lc.Stop(ctx) }()
	// Stop closes its channel before it waits: the loop then starts no round, and the claim ahead
	// is finished by finishAhead
	eventually.True(t, 10*time.Second, "stop requested", func() bool {
		lc.mu.Lock()
		defer lc.mu.Unlock()
		return lc.stop == nil
	})
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if st := co.Stats.Snapshot(); st.Claims != 6 || st.Admits != 6 {
		t.Errorf("%+v; want 6 claims and 6 admits (the claim ahead finished at the stop)", st)
	}
	if n := f.count(`SELECT count(*) FROM control_core.trigger_schedules WHERE claim_owner IS NOT NULL`); n != 0 {
		t.Errorf("%d claims left to expire after the stop", n)
	}
	if n := f.audit(); n != 6 {
		t.Errorf("%d runs, want 6", n)
	}
}

// A handle that panics (the Lifecycle recovers it) does not leave the claim sent ahead in flight:
// the round waits for it and counts its rows, which are left to expire; nothing is admitted.
func TestAPanickingHandleLeavesNoClaimInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	f.dueOnce("t0", "t1", "t2", "t3")
	co := f.coordinatorWith("r1", f.rt, []Option{WithRunIDs(func() uuid.UUID { panic("no run identity") })},
		func(c *Config) { c.Budget, c.AdmitBatch = 4, 2 })
	func() {
		defer func() { _ = recover() }()
		co.Round(ctx, nil)
		t.Error("the round returned; want its handle's panic")
	}()
	if n := co.Stats.Claims.Load(); n != 4 {
		t.Errorf("%d claims counted when the round ended, want 4 (the batch handled and the one claimed ahead)", n)
	}
	if n := f.count(`SELECT count(*) FROM control_core.trigger_schedules WHERE claim_owner = 'r1'`); n != 4 {
		t.Errorf("%d rows held by r1, want 4", n)
	}
	if n := f.count("SELECT count(*) FROM control_core.runs"); n != 0 {
		t.Errorf("%d runs", n)
	}
}

// Run identities are allocated only for an admit, i.e. when the decision fires: init, not-due and
// skip allocate none. (An admit that then loses its fence discards its identity unwritten.)
func TestRunIdentityOnlyForAnAdmit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	// yearly, months away (farYearly): no later occurrence becomes due during the round, so each
	// row is claimed once; the cursors an hour back are beyond the misfire grace (60 s), the one a
	// second back within it, and no occurrence lies between them and now (with @yearly, during the
	// first minute of a year 1 January 00:00 UTC did, on time: "skipped" was admitted, "catchup"
	// admitted twice)
	yearly := farYearly()
	f.trigger("init", yearly, schedule.MisfireSkip)
	f.trigger("due", yearly, schedule.MisfireFireOnce)
	f.trigger("skipped", yearly, schedule.MisfireSkip)
	f.trigger("catchup", yearly, schedule.MisfireFireOnce)
	f.setCursor("due", -time.Second)
	f.setCursor("skipped", -time.Hour)
	f.setCursor("catchup", -time.Hour)
	var allocated atomic.Int64
	co := f.coordinatorWith("r1", f.rt, []Option{WithRunIDs(func() uuid.UUID { allocated.Add(1); return uuid.New() })},
		func(c *Config) { c.Budget = 10 })
	co.Round(ctx, nil)
	st := co.Stats.Snapshot()
	if st.Claims != 4 || st.Admits != 2 || st.Skips != 1 || st.Releases != 1 {
		t.Errorf("stats %+v; want 4 claims, 2 admits (due, catch-up), 1 skip, 1 release (init)", st)
	}
	if allocated.Load() != st.Admits {
		t.Errorf("%d run identities allocated for %d admits", allocated.Load(), st.Admits)
	}
	if n := f.audit(); n != 2 {
		t.Errorf("%d runs, want 2", n)
	}
}

// The misfire grace in a round (docs/scheduling.md, "The decision"): an every-second trigger under
// skip whose round comes 20 s late, with a 10 s grace, gets one Run for each occurrence at most
// 10 s late when its claim decides it (the first claim skips the older ones and admits the first
// on-time one; each further claim of the row in the same round admits the next), and none for an
// occurrence beyond the grace.
func TestMisfireGraceAdmitsEachLateOccurrenceWithinIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	if _, err := f.admin.PublishTrigger(ctx, admin.TriggerSpec{Project: "p", Trigger: "s", Task: "task", Cron: "* * * * * *",
		TimeZone: "UTC", Misfire: schedule.MisfireSkip, MisfireGrace: 10 * time.Second, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	// the cursor an occurrence (a whole second) 20 to 21 s back
	var cursor int64
	if err := f.su.QueryRow(ctx, `UPDATE control_core.trigger_schedules
		SET next_fire_at_ms = control_core.db_now_ms() / 1000 * 1000 - 20000, state_version = state_version + 1
		WHERE project_id = 'p' AND trigger_id = 's' RETURNING next_fire_at_ms`).Scan(&cursor); err != nil {
		t.Fatal(err)
	}
	co := f.coordinator("r1", f.rt, func(c *Config) { c.Budget = 64 })
	co.Round(ctx, nil)
	f.audit()

	rows, err := f.su.Query(ctx, `SELECT scheduled_for_ms FROM control_core.runs WHERE trigger_id = 's' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for rows.Next() {
		var at int64
		if err := rows.Scan(&at); err != nil {
			t.Fatal(err)
		}
		got = append(got, (at-cursor)/1000) // seconds after the cursor
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Every claim decides at least 20 s after the cursor: cursor+0 … cursor+9 s are more than
	// 10 s late and skipped. cursor+13 … cursor+20 s are at most 8 s late at the first claim
	// (the margin absorbs a slow round) and each is admitted, once. The round goes on until the
	// cursor passes now, so the Runs are consecutive seconds.
	if len(got) == 0 || got[0] < 10 || got[0] > 13 || got[len(got)-1] < 20 {
		t.Fatalf("Runs at cursor + %v s; want consecutive seconds from cursor + 10…13 s to at least cursor + 20 s", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i] != got[i-1]+1 {
			t.Fatalf("Runs at cursor + %v s; want consecutive seconds (one Run per occurrence within the grace)", got)
		}
	}
	var next, now int64
	if err := f.su.QueryRow(ctx, `SELECT next_fire_at_ms, control_core.db_now_ms() FROM control_core.trigger_schedules
		WHERE trigger_id = 's'`).Scan(&next, &now); err != nil {
		t.Fatal(err)
	}
	if want := cursor + (got[len(got)-1]+1)*1000; next != want {
		t.Errorf("cursor %d after the round, want %d (the occurrence after the last Run)", next, want)
	}
}

func TestRacesAreCounted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	// yearly, months away (farYearly): the admitted row's next occurrence cannot come due within
	// fast's round (with every minute, a minute boundary during the round made it due again: a
	// second claim and Run, seen on CI under PostgreSQL 18; with @yearly, New Year's midnight did)
	f.trigger("a", farYearly(), schedule.MisfireFireOnce)
	f.setCursor("a", -time.Second)
	slow := f.coordinator("slow", f.rt)
	claim := must(slow.store.Claim(ctx, "slow", 30*time.Second)).of(t)
	f.expireClaim("a")
	fast := f.coordinator("fast", f.rt)
	fast.Round(ctx, nil)
	slow.handle(ctx, []*Claim{claim}) // the stale holder decides and admits late
	if s, fs := slow.Stats.Snapshot(), fast.Stats.Snapshot(); s.Races != 1 || s.Admits != 0 || fs.Admits != 1 {
		t.Errorf("slow %+v, fast %+v; want slow: 1 race 0 admits, fast: 1 admit", s, fs)
	}
	if n := f.audit(); n != 1 {
		t.Errorf("%d runs, want 1", n)
	}
}

// Two replicas with independent pools (different backend PIDs, different owners) on the same
// triggers: initialisation is claimed once; one due occurrence becomes exactly 1 Run, 1 Attempt
// and 2 Events.
func TestTwoPoolsSingleClaimAndExactlyOneRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	// never due by the clock while the test runs (with every minute, a minute boundary between the
	// two replicas' rounds made the initialised row due again: a second claim; with "0 0 1 1 *",
	// New Year's midnight did); the cursor set below makes the one occurrence due
	f.trigger("a", farYearly(), schedule.MisfireFireOnce)
	poolA, poolB := f.d.Handle(t, "ql_runtime"), f.d.Handle(t, "ql_runtime")
	var pidA, pidB int
	must(0, poolA.Pool().QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pidA)).of(t)
	must(0, poolB.Pool().QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pidB)).of(t)
	if pidA == pidB {
		t.Fatalf("both pools on backend %d", pidA)
	}
	a, b := f.coordinator("replica-a", poolA), f.coordinator("replica-b", poolB)
	both := func() {
		var wg sync.WaitGroup
		for _, co := range []*Coordinator{a, b} {
			wg.Add(1)
			go func() { defer wg.Done(); co.Round(ctx, nil) }()
		}
		wg.Wait()
	}
	both()
	if claims := a.Stats.Claims.Load() + b.Stats.Claims.Load(); claims != 1 {
		t.Errorf("initialisation claimed %d times, want once", claims)
	}
	f.setCursor("a", -time.Second)
	both()
	if admits := a.Stats.Admits.Load() + b.Stats.Admits.Load(); admits != 1 {
		t.Errorf("%d admits for one occurrence", admits)
	}
	if n := f.audit(); n != 1 {
		t.Errorf("%d runs, want 1", n)
	}
	if f.count("SELECT count(*) FROM control_core.attempts") != 1 || f.count("SELECT count(*) FROM control_core.run_events") != 2 {
		t.Error("want exactly 1 attempt and 2 events")
	}
}

// The claim holder's pool is closed mid-claim. Another replica cannot take the row before the
// claim expires by database time, and takes it over after.
func TestExpiryTakeoverAfterTheHolderPoolCloses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, taker := dueFixture(t, time.Second, "a")
	holderPool := f.d.Handle(t, "ql_runtime")
	held := must(NewStore(holderPool).Claim(ctx, "holder", 2*time.Second)).of(t)
	holderPool.Close()

	var took *Claim
	eventually.True(t, 30*time.Second, "a takeover of the 2 s lease", func() bool {
		took = must(taker.Claim(ctx, "taker", 30*time.Second)).of(t)
		return took != nil
	})
	if took.ClaimedAtMs < held.Fence.ExpiresAtMs {
		t.Errorf("taken over at db time %d, before the claim expired at %d", took.ClaimedAtMs, held.Fence.ExpiresAtMs)
	}
	if took.Fence.Version != held.Fence.Version+1 {
		t.Errorf("claim version %d, want %d", took.Fence.Version, held.Fence.Version+1)
	}
	if _, out, err := taker.Admit(ctx, took, *took.CursorMs, *took.CursorMs+60_000, uuid.New(), 3); err != nil || out != Written {
		t.Fatalf("admit after takeover: %v %v", out, err)
	}
	if n := f.audit(); n != 1 {
		t.Errorf("%d runs, want 1", n)
	}
}

func TestLifecycleStartStopDoubleStop(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// never due while the test runs: only its initialisation is claimed (with every minute, a
	// minute boundary during the rounds made it due again; with "0 0 1 1 *", New Year's midnight)
	f.trigger("a", farYearly(), schedule.MisfireSkip)
	co := f.coordinator("r1", f.rt, func(c *Config) { c.Cadence = 10 * time.Millisecond })
	rounds := make(chan int, 100)
	lc := NewLifecycle(co, DefaultConfig("r1"), AfterRound(func(n int) {
		select {
		case rounds <- n:
		default:
		}
	}))
	lc.cadence = 10 * time.Millisecond
	if err := lc.Stop(context.Background()); err != nil {
		t.Errorf("stop before start: %v", err)
	}
	if err := lc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := lc.Start(context.Background()); err == nil {
		t.Error("second start accepted")
	}
	for range 3 {
		<-rounds
	}
	if err := lc.Stop(context.Background()); err != nil {
		t.Errorf("stop: %v", err)
	}
	select {
	case <-lc.Done():
	default:
		t.Error("loop still running after Stop returned")
	}
	if err := lc.Stop(context.Background()); err != nil {
		t.Errorf("second stop: %v", err)
	}
	if co.Stats.Claims.Load() != 1 {
		t.Errorf("claims %d, want 1 (initialisation)", co.Stats.Claims.Load())
	}
}

// Rounds never overlap, even when a round takes longer than the cadence.
func TestLifecycleRoundsNeverOverlap(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for i := range 20 {
		f.trigger(fmt.Sprintf("t%d", i), "* * * * *", schedule.MisfireSkip)
	}
	co := f.coordinator("r1", f.rt, func(c *Config) { c.Budget = 1 })
	var inRound, maxInRound atomic.Int32
	rounds := make(chan struct{}, 1000)
	lc := NewLifecycle(co, DefaultConfig("r1"), AfterRound(func(int) {
		inRound.Add(-1)
		rounds <- struct{}{}
	}))
	lc.cadence = time.Millisecond // far below one round's duration
	lc.onRoundStart = func() {
		n := inRound.Add(1)
		if n > maxInRound.Load() {
			maxInRound.Store(n)
		}
		time.Sleep(2 * time.Millisecond) // the thing under test: each round outlasts the cadence
	}
	if err := lc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		<-rounds
	}
	if err := lc.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if maxInRound.Load() != 1 {
		t.Errorf("up to %d rounds ran at once, want 1", maxInRound.Load())
	}
}

// Stop drains within its bound: a round stuck on a lock is cancelled after the drain timeout.
func TestLifecycleStopIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	f.trigger("a", "* * * * *", schedule.MisfireFireOnce) // an admit even if a minute boundary passes
	f.setCursor("a", -time.Second)
	// Another session locks run_events: the round's admit blocks on it.
	blocker := must(f.su.Begin(ctx)).of(t)
	defer blocker.Rollback(ctx)
	if _, err := blocker.Exec(ctx, "LOCK TABLE control_core.run_events IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	co := f.coordinator("r1", f.rt)
	cfg := DefaultConfig("r1")
	cfg.DrainTimeout = time.Second
	lc := NewLifecycle(co, cfg)
	if err := lc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 30*time.Second, "the round's admit to block on the locked table", func() bool {
		return f.count(`SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND usename = 'ql_runtime' AND wait_event_type = 'Lock'`) > 0
	})
	start := time.Now()
	err := lc.Stop(ctx)
	took := time.Since(start)
	if !errors.Is(err, ErrDrainTimeout) {
		t.Errorf("stop: %v, want ErrDrainTimeout", err)
	}
	if took > 5*time.Second {
		t.Errorf("stop took %s with a 1 s drain bound", took)
	}
	if n := f.count("SELECT count(*) FROM control_core.runs"); n != 0 {
		t.Errorf("%d runs after a cancelled admit", n)
	}
}

// One admission's Run identities share a prefix and count up (side by side in the runs key);
// two admissions' do not share it (far apart); all are version 8 with the RFC 9562 variant and
// unique.
func TestRunIDsOfOneAdmissionAreAdjacentAndOfTwoApart(t *testing.T) {
	t.Parallel()
	seen := map[uuid.UUID]bool{}
	var prefixes []string
	for range 64 {
		next := RunIDs()
		var prev uuid.UUID
		for i := range MaxBudget {
			id := next()
			if id.Version() != 8 || id.Variant() != uuid.RFC4122 {
				t.Fatalf("%s: version %d, variant %s; want 8, RFC 4122/9562", id, id.Version(), id.Variant())
			}
			if seen[id] {
				t.Fatalf("%s allocated twice", id)
			}
			seen[id] = true
			if i > 0 && (string(id[:6]) != string(prev[:6]) || strings.Compare(string(id[:]), string(prev[:])) <= 0) {
				t.Fatalf("identity %d of one admission %s after %s: want the same 6-byte prefix, in increasing order", i, id, prev)
			}
			prev = id
		}
		prefixes = append(prefixes, string(prev[:6]))
	}
	slices.Sort(prefixes)
	if len(slices.Compact(prefixes)) != 64 {
		t.Error("two admissions' identities share a prefix")
	}
}

// Three single admits in flight at once, on a runs key of many leaves, all commit, the last one
// to run committing first: their Runs land apart (RunIDs), so no admit's foreign-key checks,
// reads under SERIALIZABLE, lock a leaf another writes. With time-ordered identities (UUIDv7,
// every Run on the right-edge leaf) each admit read the leaf the next one wrote, and the middle
// one, between a reader and a writer that committed first, failed with a serialization error.
func TestConcurrentSingleAdmitsDoNotAbortEachOther(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	f.dueOnce("a", "b", "c")
	// 100,000 Runs of a manual task: a runs key of hundreds of leaves
	f.d.Exec(t, `SET session_replication_role = replica;
		INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id, idempotency_key,
		                               state, owner, queued_at_ms)
		SELECT gen_random_uuid(), k.project_id, k.task_id, k.revision, k.execution_revision_id, 'bulk:' || g, 'queued',
		       'runtime', 0
		FROM control_core.task_revisions k CROSS JOIN generate_series(1, 100000) g WHERE k.project_id = 'p';
		SET session_replication_role = DEFAULT;
		ANALYZE control_core.runs`)
	claims := must(NewStore(f.rt).ClaimBatch(ctx, "r1", 30*time.Second, 3)).of(t)
	if len(claims) != 3 {
		t.Fatalf("claimed %d rows, want 3", len(claims))
	}
	admit := func(c *Claim) pgx.Tx {
		tx := must(f.rt.Pool().BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})).of(t)
		it := AdmitItem{Claim: c, ScheduledFor: *c.CursorMs, Next: *c.CursorMs + 1000, RunID: RunIDs()()}
		br := db.New(tx).Admit(ctx, []db.AdmitParams{admitParams([]AdmitItem{it})})
		written := 0
		br.Query(func(_ int, rows []db.AdmitRow, err error) {
			if err != nil {
				t.Fatalf("admit %s: %v", c.TriggerID, err)
			}
			written = len(rows)
		})
		_ = br.Close()
		if written != 1 {
			t.Fatalf("admit %s wrote %d rows, want 1", c.TriggerID, written)
		}
		return tx
	}
	txs := []pgx.Tx{admit(claims[0]), admit(claims[1]), admit(claims[2])}
	for i := 2; i >= 0; i-- {
		if err := txs[i].Commit(ctx); err != nil {
			t.Errorf("admit %d of 3 (%s), committing after those run after it: %v", i+1, claims[i].TriggerID, err)
		}
	}
	if n := f.count(`SELECT count(*) FROM control_core.runs WHERE trigger_id IN ('a', 'b', 'c')`); n != 3 {
		t.Errorf("%d runs of a, b and c, want 3", n)
	}
}
