package dispatch_test

import (
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/dispatch"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
)

// A pass skips a poll whose labels' read came back empty earlier in the pass, but the read
// depends on the session too (a Run it rejected is not its candidate): a session that rejected
// the only queued Run, waiting first, must not hide that Run from a session with the same labels
// polling after it.
func TestRejectedRunIsPlacedForTheNextSessionWithTheSameLabels(t *testing.T) {
	f := newFx(t)
	run := f.queue("p", 1)[0]
	c := f.token("w")
	rejecter := f.session(c, 1, nil)
	o := f.place(c, rejecter, 1)
	if len(o) != 1 {
		t.Fatalf("the first session's offer: %d offers, want 1", len(o))
	}
	if err := f.store.Reject(bg, c, o[0].OfferID, rejecter.ID, o[0].CallbackToken, "no room"); err != nil {
		t.Fatal(err)
	}
	other := f.session(c, 1, nil)
	pl := dispatch.NewPlacer(f.store, nil)
	if err := pl.Start(bg); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pl.Stop(bg) }()
	first := make(chan error, 1)
	go func() {
		got, err := pl.Poll(bg, c, rejecter.ID, 1, time.Minute)
		if err == nil && len(got) != 0 {
			t.Errorf("the rejecting session was offered %v again", offeredRuns(got))
		}
		first <- err
	}()
	eventually.True(t, 10*time.Second, "the rejecting session's poll waits", func() bool { return pl.WaitingPolls() == 1 })
	got, err := pl.Poll(bg, c, other.ID, 1, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].RunID != run {
		t.Fatalf("the second session was offered %v while the rejecting one waited, want the Run %s", offeredRuns(got), run)
	}
	_ = pl.Stop(bg)
	<-first
}
