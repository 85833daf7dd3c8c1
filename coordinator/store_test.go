package coordinator

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/schedule"
)

// fire claims trigger's row as owner and admits its cursor occurrence.
func fireOnce(t testing.TB, s *Store, owner string) (*Claim, Admitted, Outcome) {
	t.Helper()
	ctx := context.Background()
	c := must(s.Claim(ctx, owner, 30*time.Second)).of(t)
	if c == nil {
		t.Fatal("nothing to claim")
	}
	a, out, err := s.Admit(ctx, c, *c.CursorMs, *c.CursorMs+60_000, uuid.New(), 3)
	if err != nil {
		t.Fatalf("admit: %v", err)
	}
	return c, a, out
}

func TestClaimOrderNullsFirstThenDueTimeSkippingLockedRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		f.trigger(id, "* * * * *", schedule.MisfireSkip)
	}
	f.setCursor("a", -1*time.Minute)
	f.setCursor("b", -3*time.Minute)
	f.setCursor("c", -2*time.Minute)
	f.setCursor("e", time.Hour) // not due
	// d stays uninitialised (NULL): first. b is locked by another session: skipped, not waited on.
	lock := must(f.su.Begin(ctx)).of(t)
	defer lock.Rollback(ctx)
	if _, err := lock.Exec(ctx, "SELECT 1 FROM control_core.trigger_schedules WHERE trigger_id = 'b' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	s := NewStore(f.rt)
	var got []string
	for {
		c := must(s.Claim(ctx, "r1", 30*time.Second)).of(t)
		if c == nil {
			break
		}
		got = append(got, c.TriggerID)
	}
	if fmt.Sprint(got) != "[d c a]" {
		t.Errorf("claim order %v, want [d c a] (NULL first, then due time; b locked and skipped; e not due)", got)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if c := must(s.Claim(ctx, "r1", 30*time.Second)).of(t); c == nil || c.TriggerID != "b" {
		t.Errorf("after the lock went away, claimed %v, want b", c)
	}
}

func TestClaimWritesTheFourPartFenceWithDatabaseTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	pub := f.trigger("a", "* * * * *", schedule.MisfireSkip)
	c := must(NewStore(f.rt).Claim(ctx, "replica-1", 7*time.Second)).of(t)
	switch {
	case c == nil:
		t.Fatal("nothing claimed")
	case c.Fence.Owner != "replica-1" || c.Fence.Token == uuid.Nil || c.Fence.Version != pub.ClaimVersion+1:
		t.Errorf("fence owner=%q token=%v version=%d, want replica-1, a token, %d", c.Fence.Owner, c.Fence.Token, c.Fence.Version, pub.ClaimVersion+1)
	case c.Fence.ExpiresAtMs != c.ClaimedAtMs+7000:
		t.Errorf("expiry %d, claimed at %d: want expiry = claimed at + 7000", c.Fence.ExpiresAtMs, c.ClaimedAtMs)
	case f.count("SELECT (control_core.db_now_ms() >= $1::bigint)::int", c.ClaimedAtMs) != 1:
		t.Errorf("claimed at %d, later than database time after the claim", c.ClaimedAtMs)
	case c.StateVersion != pub.StateVersion+1:
		t.Errorf("state_version %d, want %d", c.StateVersion, pub.StateVersion+1)
	}
}

// A valid claim is never taken over; an expired one is, by anyone, with a new token and version.
func TestExpiryTakeoverConditions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	f.trigger("a", "* * * * *", schedule.MisfireSkip)
	s := NewStore(f.rt)
	first := must(s.Claim(ctx, "r1", 30*time.Second)).of(t)
	if c := must(s.Claim(ctx, "r2", 30*time.Second)).of(t); c != nil {
		t.Fatalf("a live claim was taken over by %s", c.Fence.Owner)
	}
	f.expireClaim("a")
	second := must(s.Claim(ctx, "r2", 30*time.Second)).of(t)
	if second == nil || second.Fence.Owner != "r2" || second.Fence.Version != first.Fence.Version+1 || second.Fence.Token == first.Fence.Token {
		t.Fatalf("takeover after expiry: %+v; want r2 with version %d and a new token", second, first.Fence.Version+1)
	}
}

// ABA: the old holder's admit fails on token/version even when the new holder has the same owner
// name; the new holder's admit succeeds. Exactly one Run.
func TestFullFenceRaceSameOwnerName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, s := dueFixture(t, time.Second, "a")
	old := must(s.Claim(ctx, "replica", 30*time.Second)).of(t)
	f.expireClaim("a")
	fresh := must(s.Claim(ctx, "replica", 30*time.Second)).of(t)
	if fresh == nil {
		t.Fatal("no takeover")
	}
	_, out, err := s.Admit(ctx, old, *old.CursorMs, *old.CursorMs+60_000, uuid.New(), 3)
	if err != nil || out != Race {
		t.Fatalf("old holder's admit: %v, %v; want a race", out, err)
	}
	if out, err := s.Advance(ctx, old, *old.CursorMs+60_000); err != nil || out != Race {
		t.Fatalf("old holder's skip: %v, %v; want a race", out, err)
	}
	_, out, err = s.Admit(ctx, fresh, *fresh.CursorMs, *fresh.CursorMs+60_000, uuid.New(), 3)
	if err != nil || out != Written {
		t.Fatalf("new holder's admit: %v, %v; want written", out, err)
	}
	if n := f.audit(); n != 1 {
		t.Errorf("%d runs, want 1", n)
	}
}

func TestAdmitWritesRunAttemptEventsAndAdvancesAtomically(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	pub := f.trigger("nightly", "0 3 * * *", schedule.MisfireSkip)
	cursor := f.setCursor("nightly", -time.Second)
	c, a, out := fireOnce(t, NewStore(f.rt), "r1")
	if out != Written {
		t.Fatalf("admit outcome %s", out)
	}
	var (
		key, state, owner, attemptState, executor string
		attemptNo                                 int
		nulls                                     bool
		events                                    string
	)
	err := f.su.QueryRow(ctx, `SELECT r.idempotency_key, r.state, r.owner, a.state, a.executor_kind, a.attempt_no,
		  (a.worker_id, a.worker_session_id, a.run_lease_id, a.offer_id, a.callback_token_hash, a.started_at_ms, a.result, a.error) IS NULL,
		  (SELECT string_agg(e.seq || ':' || e.type, ',' ORDER BY e.seq) FROM control_core.run_events e WHERE e.run_id = r.run_id)
		FROM control_core.runs r JOIN control_core.attempts a ON a.run_id = r.run_id WHERE r.run_id = $1`, a.RunID).
		Scan(&key, &state, &owner, &attemptState, &executor, &attemptNo, &nulls, &events)
	if err != nil {
		t.Fatal(err)
	}
	wantKey := fmt.Sprintf("ql3:cron:v1:nightly:%d:%d", pub.Revision, cursor)
	if key != wantKey || state != "queued" || owner != "runtime" || attemptState != "claimed" || executor != "remote_worker" ||
		attemptNo != 1 || !nulls || events != "1:run.created,2:run.queued" {
		t.Errorf("got key %s state %s owner %s attempt %s/%s #%d pristine=%v events %s;\nwant %s queued runtime claimed/remote_worker #1 pristine run.created,run.queued",
			key, state, owner, attemptState, executor, attemptNo, nulls, events, wantKey)
	}
	var next, last int64
	var claimed bool
	if err := f.su.QueryRow(ctx, `SELECT next_fire_at_ms, last_scheduled_at_ms, claim_token IS NOT NULL
		FROM control_core.trigger_schedules WHERE trigger_id = 'nightly'`).Scan(&next, &last, &claimed); err != nil {
		t.Fatal(err)
	}
	if next != *c.CursorMs+60_000 || last != cursor || claimed {
		t.Errorf("schedule next=%d last=%d claimed=%v; want next=%d last=%d and no claim", next, last, claimed, cursor+60_000, cursor)
	}
}

// A write fault inside the admit (here a constraint violation on the second event) rolls back
// everything: no Run, no Attempt, no Event, and the claim is still held, untouched.
func TestAdmitRollsBackOnAnInjectedWriteFault(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, s := dueFixture(t, time.Second, "a")
	f.exec(`ALTER TABLE control_core.run_events ADD CONSTRAINT injected_fault CHECK (type <> 'run.queued')`)
	c := must(s.Claim(ctx, "r1", 30*time.Second)).of(t)
	_, _, err := s.Admit(ctx, c, *c.CursorMs, *c.CursorMs+60_000, uuid.New(), 3)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.ConstraintName != "injected_fault" {
		t.Fatalf("admit err %v, want the injected constraint violation", err)
	}
	for table, want := range map[string]int{"runs": 0, "attempts": 0, "run_events": 0} {
		if n := f.count("SELECT count(*) FROM control_core." + table); n != want {
			t.Errorf("%s has %d rows after the rolled-back admit, want %d", table, n, want)
		}
	}
	var token [16]byte
	var version, stateVersion, cursor int64
	if err := f.su.QueryRow(ctx, `SELECT claim_token, claim_version, state_version, next_fire_at_ms
		FROM control_core.trigger_schedules WHERE trigger_id = 'a'`).Scan(&token, &version, &stateVersion, &cursor); err != nil {
		t.Fatal(err)
	}
	if token != c.Fence.Token || version != c.Fence.Version || stateVersion != c.StateVersion || cursor != *c.CursorMs {
		t.Errorf("the claim changed: token %x version %d state %d cursor %d; want %x %d %d %d", token, version, stateVersion, cursor,
			c.Fence.Token, c.Fence.Version, c.StateVersion, *c.CursorMs)
	}
}

func TestAdmitRefusesCorruptOrChangedRevisions(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		tamper string
		want   Outcome
	}{
		{"execution spec edited behind its digest", `UPDATE control_core.execution_revisions SET spec = spec || '{"tampered": true}'`, Corrupt},
		{"execution digest corrupted", `UPDATE control_core.execution_revisions SET digest = repeat('0', 64)`, Corrupt},
		{"trigger revision edited behind its digest", `UPDATE control_core.trigger_revisions SET cron_spec = '* * * * *'`, Corrupt},
		{"task revision digest corrupted", `UPDATE control_core.task_revisions SET content_digest = repeat('1', 64)`, Corrupt},
		{"project archived (a proper new revision)", `UPDATE control_core.projects SET state = 'archived', revision = revision + 1,
			content_digest = encode(sha256(convert_to(jsonb_build_object('project_id', project_id, 'state', 'archived',
				'revision', revision + 1)::text, 'UTF8')), 'hex')`, Stale},
		{"project archived behind its digest", `UPDATE control_core.projects SET state = 'archived'`, Corrupt},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f := newFixture(t)
			f.trigger("a", "*/5 * * * *", schedule.MisfireSkip)
			f.setCursor("a", -time.Second)
			s := NewStore(f.rt)
			c := must(s.Claim(ctx, "r1", 30*time.Second)).of(t)
			f.exec(tc.tamper)
			_, out, err := s.Admit(ctx, c, *c.CursorMs, *c.CursorMs+300_000, uuid.New(), 3)
			if err != nil || out != tc.want {
				t.Fatalf("admit: %v, %v; want %s", out, err, tc.want)
			}
			if n := f.count("SELECT count(*) FROM control_core.runs"); n != 0 {
				t.Errorf("%d runs admitted, want 0", n)
			}
		})
	}
}

func TestRepublishInvalidatesAnOutstandingClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	f.trigger("a", "* * * * *", schedule.MisfireFireOnce)
	f.setCursor("a", -time.Second)
	s := NewStore(f.rt)
	c := must(s.Claim(ctx, "r1", 30*time.Second)).of(t)
	pub := f.trigger("a", "*/2 * * * *", schedule.MisfireFireOnce)
	if pub.Revision != 2 || pub.ClaimVersion != c.Fence.Version+1 {
		t.Errorf("republish: revision %d claim_version %d; want 2 and %d", pub.Revision, pub.ClaimVersion, c.Fence.Version+1)
	}
	if _, out, err := s.Admit(ctx, c, *c.CursorMs, *c.CursorMs+60_000, uuid.New(), 3); err != nil || out != Race {
		t.Fatalf("admit under the old revision: %v, %v; want a race", out, err)
	}
	var next *int64
	var owner *string
	if err := f.su.QueryRow(ctx, `SELECT next_fire_at_ms, claim_owner FROM control_core.trigger_schedules WHERE trigger_id = 'a'`).Scan(&next, &owner); err != nil {
		t.Fatal(err)
	}
	if next != nil || owner != nil || f.count("SELECT count(*) FROM control_core.runs") != 0 {
		t.Errorf("after republish: cursor %v, claim owner %v, runs %d; want cleared cursor and claim, no run", next, owner, f.count("SELECT count(*) FROM control_core.runs"))
	}
}

func TestSkipAdvancesOnlyAndIsFenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	// An hourly cron whose latest occurrence is half an hour old, never within the 60 s grace
	// that would admit it: "0 * * * *" admitted in the first minute of an hour (CI, 22:00). The
	// minute is UTC's, the trigger's zone: the host's local minute is half an hour off it in
	// zones such as Asia/Kolkata, and made the cron fire at the current minute.
	f.trigger("hourly", fmt.Sprintf("%d * * * *", (time.Now().UTC().Minute()+30)%60), schedule.MisfireSkip)
	f.setCursor("hourly", -5*time.Hour) // a long outage
	co := f.coordinator("r1", f.rt)
	if n := co.Round(ctx, nil); n != 1 {
		t.Fatalf("round claimed %d, want 1", n)
	}
	st := co.Stats.Snapshot()
	if st.Skips != 1 || st.Admits != 0 || f.count("SELECT count(*) FROM control_core.runs") != 0 {
		t.Errorf("stats %+v; want 1 skip, 0 admits, no run", st)
	}
	if f.count(`SELECT count(*) FROM control_core.trigger_schedules WHERE trigger_id = 'hourly'
		AND next_fire_at_ms > control_core.db_now_ms() AND claim_token IS NULL`) != 1 {
		t.Error("skip did not move the cursor past now and clear the claim")
	}
}

func TestRuntimeRoleCannotCreateSchedules(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, err := f.rt.Pool().Exec(context.Background(), `INSERT INTO control_core.trigger_schedules
		(project_id, trigger_id, trigger_revision, state_version, claim_version, updated_at_ms) VALUES ('p', 'x', 1, 1, 0, 1)`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Errorf("INSERT as ql_runtime: %v, want permission denied (42501)", err)
	}
	_, err = f.rt.Pool().Exec(context.Background(), `DELETE FROM control_core.trigger_schedules`)
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Errorf("DELETE as ql_runtime: %v, want permission denied (42501)", err)
	}
}

// The claim takes only rows of an active project and an enabled trigger, and breaks a tie of
// equal cursors by project_id, then trigger_id.
func TestClaimFiltersAndTieBreak(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	if _, err := f.admin.CreateProject(ctx, "a-first"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.PublishTask(ctx, admin.TaskSpec{Project: "a-first", Task: "task", ExecutorSpec: []byte(`{"image":"example/job:1"}`)}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"z", "m", "off"} {
		f.trigger(id, "* * * * *", schedule.MisfireSkip)
	}
	if _, err := f.admin.PublishTrigger(ctx, admin.TriggerSpec{Project: "a-first", Trigger: "z", Task: "task",
		Cron: "* * * * *", TimeZone: "UTC", Misfire: schedule.MisfireSkip, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.PublishTrigger(ctx, admin.TriggerSpec{Project: "p", Trigger: "off", Task: "task",
		Cron: "* * * * *", TimeZone: "UTC", Misfire: schedule.MisfireSkip, Enabled: false}); err != nil {
		t.Fatal(err)
	}
	// every row at the same cursor, so only the tie-break orders them
	f.exec(`UPDATE control_core.trigger_schedules SET next_fire_at_ms = control_core.db_now_ms() - 1000, state_version = state_version + 1`)
	s := NewStore(f.rt)
	var got []string
	for c := must(s.Claim(ctx, "r1", 30*time.Second)).of(t); c != nil; c = must(s.Claim(ctx, "r1", 30*time.Second)).of(t) {
		got = append(got, c.ProjectID+"/"+c.TriggerID)
	}
	if fmt.Sprint(got) != "[a-first/z p/m p/z]" {
		t.Errorf("claimed %v, want [a-first/z p/m p/z] (project, then trigger; the disabled trigger never)", got)
	}
	// An archived project's rows are not claimable either.
	f.exec(`UPDATE control_core.trigger_schedules SET claim_owner = NULL, claim_token = NULL, claim_expires_at_ms = NULL,
		state_version = state_version + 1 WHERE project_id = 'a-first'`)
	f.exec(`UPDATE control_core.projects SET state = 'archived' WHERE project_id = 'a-first'`)
	if c := must(s.Claim(ctx, "r1", 30*time.Second)).of(t); c != nil {
		t.Errorf("claimed %s/%s of an archived project", c.ProjectID, c.TriggerID)
	}
}

// ABA, item by item: a copy of the live claim that differs only in its token, or only in its
// claim version, loses the fence; the untouched copy wins.
func TestAdmitChecksTokenAndVersionOnTheirOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, s := dueFixture(t, time.Second, "a")
	live := must(s.Claim(ctx, "replica", 30*time.Second)).of(t)
	otherToken, otherVersion := *live, *live
	otherToken.Fence.Token = uuid.New()
	otherVersion.Fence.Version--
	for name, c := range map[string]*Claim{"token": &otherToken, "version": &otherVersion} {
		if _, out, err := s.Admit(ctx, c, *c.CursorMs, *c.CursorMs+60_000, uuid.New(), 3); err != nil || out != Race {
			t.Errorf("admit with another %s: %v, %v; want a race", name, out, err)
		}
		if out, err := s.Advance(ctx, c, *c.CursorMs+60_000); err != nil || out != Race {
			t.Errorf("skip with another %s: %v, %v; want a race", name, out, err)
		}
	}
	if _, out, err := s.Admit(ctx, live, *live.CursorMs, *live.CursorMs+60_000, uuid.New(), 3); err != nil || out != Written {
		t.Fatalf("admit under the live fence: %v, %v; want written", out, err)
	}
	if n := f.audit(); n != 1 {
		t.Errorf("%d runs, want 1", n)
	}
}

// The admit verifies the decision against the claim's observation of database time
// (ClaimedAtMs): an observation other than the claim's, a candidate not yet due at it, or a
// next fire time not after the candidate writes nothing, and the claim stays held.
func TestAdmitVerifiesTheDecisionsObservation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		forge  func(c *Claim) (scheduled, next int64)
		wantOK bool
	}{
		{"as decided", func(c *Claim) (int64, int64) { return *c.CursorMs, c.ClaimedAtMs + 1 }, true},
		{"another observation", func(c *Claim) (int64, int64) {
			c.ClaimedAtMs += 5000
			return *c.CursorMs, c.ClaimedAtMs + 1
		}, false},
		{"candidate after the observation", func(c *Claim) (int64, int64) { return c.ClaimedAtMs + 1, c.ClaimedAtMs + 60_000 }, false},
		// an on-time successor still due (within the misfire grace) is the next claim's
		{"next fire time due, after the candidate", func(c *Claim) (int64, int64) { return *c.CursorMs, *c.CursorMs + 1 }, true},
		{"next fire time not after the candidate", func(c *Claim) (int64, int64) { return *c.CursorMs, *c.CursorMs }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			f, s := dueFixture(t, 2*time.Second, "a")
			claim := must(s.Claim(ctx, "r1", 30*time.Second)).of(t)
			c := *claim
			scheduled, next := tc.forge(&c)
			_, out, err := s.Admit(ctx, &c, scheduled, next, uuid.New(), 3)
			if tc.wantOK {
				if err != nil || out != Written {
					t.Fatalf("admit: %v, %v; want written", out, err)
				}
				return
			}
			if !errors.Is(err, ErrAdmitInvalid) {
				t.Errorf("admit: %v, %v; want ErrAdmitInvalid", out, err)
			}
			if n := f.count("SELECT count(*) FROM control_core.runs"); n != 0 {
				t.Errorf("%d runs, want 0", n)
			}
			if f.count("SELECT count(*) FROM control_core.trigger_schedules WHERE claim_token = $1", claim.Fence.Token) != 1 {
				t.Error("the claim is no longer held")
			}
		})
	}
}

// Trigger ids are unique per project only: the same trigger id in two projects, firing at the
// same time, gets one Run in each (the idempotency key is unique per project).
func TestSameTriggerIDInTwoProjectsAdmitsBoth(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	if _, err := f.admin.CreateProject(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.PublishTask(ctx, admin.TaskSpec{Project: "q", Task: "task", ExecutorSpec: []byte(`{"image":"example/job:1"}`)}); err != nil {
		t.Fatal(err)
	}
	f.trigger("nightly", "0 3 * * *", schedule.MisfireSkip)
	if _, err := f.admin.PublishTrigger(ctx, admin.TriggerSpec{Project: "q", Trigger: "nightly", Task: "task",
		Cron: "0 3 * * *", TimeZone: "UTC", Misfire: schedule.MisfireSkip, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	f.exec(`UPDATE control_core.trigger_schedules SET next_fire_at_ms = (control_core.db_now_ms() - 1000) / 1000 * 1000,
		state_version = state_version + 1`)
	s := NewStore(f.rt)
	for range 2 {
		if _, _, out := fireOnce(t, s, "r1"); out != Written {
			t.Fatalf("admit: %s, want written", out)
		}
	}
	if n := f.count(`SELECT count(DISTINCT project_id) FROM control_core.runs`); n != 2 {
		t.Errorf("runs in %d projects, want 2", n)
	}
	if n := f.count(`SELECT count(DISTINCT idempotency_key) FROM control_core.runs`); n != 1 {
		t.Errorf("%d distinct keys, want 1 (the ADR's key names no project)", n)
	}
}

// A serialization failure is retried, a bounded number of times: a concurrent update of the
// schedule row, committed while the admit waits for its row lock, fails the admit with 40001;
// the retry then finds the row changed and reports a race. Nothing is written.
func TestAdmitRetriesASerializationFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, s := dueFixture(t, time.Second, "a")
	c := must(s.Claim(ctx, "r1", 30*time.Second)).of(t)
	tx := must(f.su.Begin(ctx)).of(t)
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `UPDATE control_core.trigger_schedules SET state_version = state_version + 1 WHERE trigger_id = 'a'`); err != nil {
		t.Fatal(err)
	}
	done := make(chan AdmitResult, 1)
	go func() {
		done <- s.AdmitBatch(ctx, []AdmitItem{{Claim: c, ScheduledFor: *c.CursorMs, Next: c.ClaimedAtMs + 60_000, RunID: uuid.New()}}, 2)[0]
	}()
	// wait until the admit is blocked on the row lock the transaction holds
	for f.count(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND usename = 'ql_runtime'`) == 0 {
		select {
		case r := <-done:
			t.Fatalf("admit ended before it waited on the lock: %+v", r)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.Err != nil || r.Outcome != Race || r.Retries != 1 {
		t.Errorf("admit: outcome %s, retries %d, err %v; want a race after 1 retry", r.Outcome, r.Retries, r.Err)
	}
	if n := f.count("SELECT count(*) FROM control_core.runs"); n != 0 {
		t.Errorf("%d runs, want 0", n)
	}
}
