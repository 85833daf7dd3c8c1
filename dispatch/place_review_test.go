package dispatch_test

// Placement's edges, from the hostile review of a pass that served its polls of one label set
// from one read (tried in stop 46 and reverted: these tests failed on it, and hold for the pass
// that serves its polls one by one) and of the Offer statement's LIMIT of the session's free
// slots.

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/dispatch"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
)

// ackAndComplete ACKs an offer and reports it succeeded.
func ackAndComplete(t *testing.T, f *fx, c dispatch.Credential, s dispatch.Session, o dispatch.Offer) {
	t.Helper()
	l, err := f.store.Ack(bg, c, o.OfferID, s.ID, o.CallbackToken)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.Complete(bg, c, o.AttemptID, dispatch.Report{SessionID: s.ID, CallbackToken: o.CallbackToken,
		LeaseVersion: l.LeaseVersion, Outcome: dispatch.OutcomeSucceeded}); err != nil {
		t.Fatal(err)
	}
}

// A poll whose session has no slot free, waiting first in arrival order, takes the first share
// of every pass's read (the oldest Runs) and offers nothing; the poll after it gets the younger
// Runs, pass after pass, for as long as the first poll waits (up to PollMaxWait): the oldest
// queued Run is held back. Poll by poll, the full session's read offered nothing and the next
// poll read the oldest Run. docs/dispatch.md: "a share that could not be offered ... stays
// queued for the next pass (a probe away at most)" — here it stays for every pass.
func TestAFullSessionsWaitingPollDoesNotHoldBackTheOldestRun(t *testing.T) {
	f := newFx(t)
	runs := f.queue("p", 5)
	c := f.token("w")
	full := f.session(c, 1, nil)
	if o := f.place(c, full, 1); len(o) != 1 || o[0].RunID != runs[0] { // its one slot: an outstanding offer
		t.Fatalf("the full session's offer: %v, want %s", offeredRuns(o), runs[0])
	}
	pl := dispatch.NewPlacer(f.store, nil)
	if err := pl.Start(bg); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pl.Stop(bg) }()
	first := make(chan error, 1)
	go func() {
		got, err := pl.Poll(bg, c, full.ID, 1, time.Minute)
		if err == nil && len(got) != 0 {
			err = errors.New("a session with no slot free was offered Runs")
		}
		first <- err
	}()
	eventually.True(t, 10*time.Second, "the full session's poll waits", func() bool { return pl.WaitingPolls() == 1 })
	// a whole pass served the full session's poll alone (the pass after p0 started after it
	// waited, and ended before the next one started)
	p0 := pl.Passes()
	eventually.True(t, 10*time.Second, "a pass over the full session's poll alone", func() bool { return pl.Passes() >= p0+2 })
	other := f.session(c, 1, nil)
	var order []uuid.UUID
	for range 3 {
		got, err := pl.Poll(bg, c, other.ID, 1, 5*time.Second)
		if err != nil || len(got) != 1 {
			t.Fatalf("poll %d of the other session: %v %v", len(order)+1, offeredRuns(got), err)
		}
		order = append(order, got[0].RunID)
		ackAndComplete(t, f, c, other, got[0])
	}
	if want := runs[1:4]; !slices.Equal(order, want) {
		t.Errorf("while the full session's poll waited first, the other session was offered %v, want the oldest queued Runs %v (%s stays queued: %s)",
			order, want, runs[1], f.state(runs[1]))
	}
	_ = pl.Stop(bg)
	if err := <-first; err != nil && !errors.Is(err, dispatch.ErrStopping) {
		t.Error(err)
	}
}

// The group's read is bounded like any read (ScanCap Runs per project, MaxProjects projects):
// that it returned fewer Runs than asked for and each was offered does not mean it held every
// ready Run, and the polls without a share must be served in the pass (poll by poll, each read
// its own and was). With the defaults: nine sessions of capacity 8 (72 slots) over one project's
// 100 Runs, the read returns 64.
func TestAGroupLargerThanOneReadServesEveryPoll(t *testing.T) {
	t.Run("ScanCap", func(t *testing.T) {
		f := newFx(t)
		f.queue("p", 100)
		c := f.token("w")
		ss := make([]dispatch.Session, 9)
		for i := range ss {
			ss[i] = f.session(c, 8, nil)
		}
		got := dispatch.NewPlacer(f.store, nil).PassOver(bg, c, ss)
		for i, s := range ss {
			if len(got[s.ID]) != 8 {
				t.Errorf("poll %d of 9 (capacity 8, 100 Runs queued) was offered %d Runs in the pass, want 8", i+1, len(got[s.ID]))
			}
		}
	})
	t.Run("MaxProjects", func(t *testing.T) {
		f := newFx(t, dispatch.Config{OfferTTL: time.Minute, LeaseTTL: time.Minute, MaxProjects: 2})
		f.project("a")
		f.project("b")
		for _, p := range []string{"a", "b", "p"} {
			f.queue(p, 1)
		}
		c := f.token("w")
		ss := []dispatch.Session{f.session(c, 1, nil), f.session(c, 1, nil), f.session(c, 1, nil)}
		got := dispatch.NewPlacer(f.store, nil).PassOver(bg, c, ss)
		for i, s := range ss {
			if len(got[s.ID]) != 1 {
				t.Errorf("poll %d of 3 (three projects, one Run each, MaxProjects 2) was offered %d Runs in the pass, want 1", i+1, len(got[s.ID]))
			}
		}
	})
}

// corruptProject makes project id with a task revision whose content digest no longer
// recomputes (P′ fails its Runs closed), arranged as superuser.
func (f *fx) corruptProject(id string) {
	f.t.Helper()
	f.project(id)
	err := pgx.BeginFunc(bg, f.su, func(tx pgx.Tx) error {
		if _, err := tx.Exec(bg, "SET LOCAL session_replication_role = replica"); err != nil {
			return err
		}
		_, err := tx.Exec(bg, `UPDATE control_core.task_revisions SET content_digest = repeat('1', 64) WHERE project_id = $1`, id)
		return err
	})
	if err != nil {
		f.t.Fatalf("corrupt the revision of %s: %v", id, err)
	}
}

// The Offer statement locks at most the session's free slots of its candidates, counting the ones
// it then fails closed (P′: a revision digest mismatch): a poll of the session's whole capacity
// whose first candidate is corrupt gets one Run fewer than is ready, though its read held spare
// candidates for it (before the LIMIT, every candidate was locked and the good ones filled the
// free slots). The corrupt Run is failed either way; nothing good is failed.
func TestAnOfferFillsThePollPastACorruptRun(t *testing.T) {
	f := newFx(t)
	f.corruptProject("bad") // sorts before "p": its Run is the read's first candidate
	bad := f.queue("bad", 1)[0]
	good := f.queue("p", 3)
	c := f.token("w")
	s := f.session(c, 2, nil)
	got, err := dispatch.NewPlacer(f.store, nil).PlaceFor(bg, c, s, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ev := f.events(bad); ev != "run.created run.queued run.failed:revision_digest_mismatch" {
		t.Errorf("the corrupt Run's events: %s", ev)
	}
	for _, id := range good {
		if st := f.str(`SELECT state FROM control_core.runs WHERE run_id = $1`, id); st == "failed" {
			t.Errorf("a good Run %s was failed", id)
		}
	}
	if want := good[:2]; !slices.Equal(offeredRuns(got), want) {
		t.Errorf("a poll of 2 slots with a corrupt first candidate was offered %v, want %v (the read held them)", offeredRuns(got), want)
	}
}

// A session fence that fails for one poll of a group (its session expired, its token revoked, its
// session draining) ends that poll with the fence's error and disturbs no other: each other poll
// gets its share in the same pass, and the failed polls' shares stay queued.
func TestAFenceErrorInAGroupLeavesTheOtherPolls(t *testing.T) {
	f := newFx(t)
	f.queue("p", 6)
	c, revoked := f.token("w"), f.token("revoked")
	ss := []dispatch.Session{f.session(c, 1, nil), f.session(c, 1, nil), f.session(revoked, 1, nil),
		f.session(c, 1, nil), f.session(c, 1, nil)}
	creds := []dispatch.Credential{c, c, revoked, c, c}
	f.expireSession(ss[1].ID)
	f.revoke(revoked)
	if _, err := f.store.Drain(bg, c, ss[3].ID); err != nil {
		t.Fatal(err)
	}
	got, ended := dispatch.NewPlacer(f.store, nil).PassOverPolls(bg, creds, ss, nil)
	want := []error{nil, dispatch.ErrSessionGone, dispatch.ErrUnauthorized, dispatch.ErrSessionDraining, nil}
	for i, s := range ss {
		switch {
		case want[i] == nil && (len(got[s.ID]) != 1 || ended[s.ID] != nil):
			t.Errorf("poll %d (live) was offered %v and ended with %v, want one Run", i+1, offeredRuns(got[s.ID]), ended[s.ID])
		case want[i] != nil && (!errors.Is(ended[s.ID], want[i]) || len(got[s.ID]) != 0):
			t.Errorf("poll %d was offered %v and ended with %v, want %v", i+1, offeredRuns(got[s.ID]), ended[s.ID], want[i])
		}
	}
	if n := f.count(`SELECT count(*) FROM control_core.dispatch_offers`); n != 2 {
		t.Errorf("%d offers written, want the two live polls'", n)
	}
	if n := f.count(`SELECT count(*) FROM control_core.runs WHERE state = 'queued'`); n != 4 {
		t.Errorf("%d Runs queued, want 4", n)
	}
}

// A dispatcher whose pool has one connection (pool_max_conns=1): the placer's concurrent offers
// and the workers' ACKs and reports share it without a stall.
func TestPlacementOnAOneConnectionPool(t *testing.T) {
	const runs = 40
	f := newFx(t)
	f.queue("p", runs)
	u, err := url.Parse(f.d.URL("ql_runtime"))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", "1")
	u.RawQuery = q.Encode()
	cfg, err := dbconn.Resolve(u.String())
	if err != nil {
		t.Fatal(err)
	}
	h, err := cfg.Open(bg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if got := h.Pool().Config().MaxConns; got != 1 {
		t.Fatalf("pool of %d connections, want 1", got)
	}
	store := dispatch.NewStore(h, testConfig)
	pl := dispatch.NewPlacer(store, nil)
	if err := pl.Start(bg); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pl.Stop(bg) }()
	c := f.token("w")
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	var mu sync.Mutex
	completed := 0
	var wg sync.WaitGroup
	for i := range 4 {
		s := f.session(c, 1+i%2, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				mu.Lock()
				finished := completed >= runs
				mu.Unlock()
				if finished {
					return
				}
				got, err := pl.Poll(ctx, c, s.ID, s.Capacity, 200*time.Millisecond)
				if err != nil {
					t.Errorf("session %d: poll: %v", i, err)
					return
				}
				var acks sync.WaitGroup
				for _, o := range got {
					acks.Go(func() {
						l, err := store.Ack(ctx, c, o.OfferID, s.ID, o.CallbackToken)
						if err == nil {
							_, err = store.Complete(ctx, c, o.AttemptID, dispatch.Report{SessionID: s.ID, CallbackToken: o.CallbackToken,
								LeaseVersion: l.LeaseVersion, Outcome: dispatch.OutcomeSucceeded})
						}
						if err != nil {
							t.Errorf("session %d: %v", i, err)
							return
						}
						mu.Lock()
						completed++
						mu.Unlock()
					})
				}
				acks.Wait()
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("stalled: %d of %d Runs completed in a minute", completed, runs)
	}
	if n := f.count(`SELECT count(*) FROM control_core.runs WHERE state = 'succeeded'`); n != runs {
		t.Errorf("%d of %d Runs succeeded", n, runs)
	}
}

// TestFairness with two polls a pass: project z's 1,000 queued Runs do not delay a's and b's
// three each; the rotation offers theirs within the first nine placements (three rotations), as
// it does for one session. Poll by poll, each read went on from the cursor the poll before it
// moved (a1 b1 | z1 a2 | b2 z2 | a3 b3: eight placements). The group's one read after b's cursor
// holds z's Runs only (z alone fills it: no wrap), so both polls of every other pass take z
// (a1 b1 | z1 z2 | a2 b2 | z3 z4 | a3 b3: ten); with N polls of one slot, z takes all N.
func TestFairnessWithTwoPollsAPass(t *testing.T) {
	f := newFx(t)
	f.project("a")
	f.project("b")
	f.project("z")
	f.queue("z", 1000)
	small := map[uuid.UUID]bool{}
	for _, id := range append(f.queue("a", 3), f.queue("b", 3)...) {
		small[id] = true
	}
	c := f.token("w")
	ss := []dispatch.Session{f.session(c, 1, nil), f.session(c, 1, nil)}
	pl := dispatch.NewPlacer(f.store, nil)
	var order []string
	for pass := 0; len(small) > 0 && pass < 8; pass++ {
		got := pl.PassOver(bg, c, ss)
		for _, s := range ss {
			if len(got[s.ID]) != 1 {
				t.Fatalf("pass %d: session offered %v, want one Run", pass+1, offeredRuns(got[s.ID]))
			}
			o := got[s.ID][0]
			order = append(order, o.ProjectID)
			delete(small, o.RunID)
			ackAndComplete(t, f, c, s, o)
		}
	}
	for i, p := range order {
		if p != "z" && i >= 9 {
			t.Errorf("placement order %v: a project with 3 Runs placed at %d, after three rotations", order, i+1)
			break
		}
	}
}
