package dispatch_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/dispatch"
)

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
