package dispatch_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/dispatch"
)

// A pass serves the polls of one label set from one candidate read, each poll its share in
// arrival order (offerAtOnce): a burst reaches every waiting poll after one read, not a read and
// an offer per poll before it. Polls of other labels read on their own.
func TestAPassServesEveryPollOfALabelSetFromOneRead(t *testing.T) {
	f := newFx(t)
	runs := f.queue("p", 5)
	c := f.token("w")
	ss := []dispatch.Session{f.session(c, 2, nil), f.session(c, 2, nil), f.session(c, 2, nil)}
	pl := dispatch.NewPlacer(f.store, nil)
	got, reads := pl.PassOver(bg, c, ss)
	if reads != 1 {
		t.Errorf("the pass made %d candidate reads for three polls of one label set, want 1", reads)
	}
	seen := map[uuid.UUID]bool{}
	for i, want := range []int{2, 2, 1} {
		if len(got[ss[i].ID]) != want {
			t.Errorf("poll %d was offered %d Runs, want %d", i+1, len(got[ss[i].ID]), want)
		}
		for _, o := range got[ss[i].ID] {
			if seen[o.RunID] {
				t.Errorf("Run %s offered twice", o.RunID)
			}
			seen[o.RunID] = true
		}
	}
	if len(seen) != len(runs) {
		t.Errorf("%d of %d Runs offered", len(seen), len(runs))
	}
}

// A poll whose share of the read could not be offered (here: its session has no slot free) is
// served again on its own after the others, and its share waits for the next pass instead of
// being lost; the read is not repeated for polls that the read served.
func TestAPollWhoseShareWasNotOfferedIsServedOnItsOwn(t *testing.T) {
	f := newFx(t)
	f.queue("p", 3)
	c := f.token("w")
	full := f.session(c, 1, nil)
	if len(f.place(c, full, 1)) != 1 { // its one slot is held by an outstanding offer
		t.Fatal("the first session's offer was not made")
	}
	other := f.session(c, 2, nil)
	pl := dispatch.NewPlacer(f.store, nil)
	got, reads := pl.PassOver(bg, c, []dispatch.Session{full, other})
	if len(got[full.ID]) != 0 {
		t.Errorf("a session with no slot free was offered %v", offeredRuns(got[full.ID]))
	}
	if len(got[other.ID]) != 1 {
		t.Errorf("the second poll was offered %d Runs, want 1 (its share)", len(got[other.ID]))
	}
	// one read for both, then the full session's own read (and its read again: nothing offered)
	if reads != 3 {
		t.Errorf("%d candidate reads, want 3", reads)
	}
	if n := f.count(`SELECT count(*) FROM control_core.runs WHERE state = 'queued'`); n != 1 {
		t.Errorf("%d Runs queued after the pass, want 1 (the full session's share)", n)
	}
}

// An offer locks no more candidates than its session has slots free: the spare ones it was given
// stay free for another dispatcher's offer meanwhile (before, they were locked until its commit,
// and the other offer skipped them: its poll waited for the next probe).
func TestAnOfferLeavesTheCandidatesItCannotTakeUnlocked(t *testing.T) {
	f := newFx(t)
	f.queue("p", 2)
	c := f.token("w")
	one, other := f.session(c, 1, nil), f.session(c, 1, nil)
	cands, _, err := f.store.Candidates(bg, dispatch.CandidateQuery{SessionID: uuid.Nil, Slots: 2})
	if err != nil || len(cands) != 2 {
		t.Fatalf("candidates: %v %v", cands, err)
	}
	n, commit, err := f.store.OfferHeld(bg, c, one.ID, cands)
	if err != nil || n != 1 {
		t.Fatalf("the held offer: %d offers, %v; want 1", n, err)
	}
	got, err := f.store.Offer(bg, c, other.ID, cands[1:])
	if cerr := commit(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].RunID != cands[1].RunID {
		t.Fatalf("while the first offer was open, the second session was offered %v, want the spare Run %s",
			offeredRuns(got), cands[1].RunID)
	}
}
