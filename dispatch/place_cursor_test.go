package dispatch_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/dispatch"
)

// A poll of a session whose free capacity is taken (an offer it never got back, still live)
// offers nothing: its reads must not move the rotation cursor, or a working session's poll in the
// same passes is served by the same project every pass (here: three projects, the idle session's
// two reads and the working one's read move it three projects a pass, back to where it was).
func TestCursorMovesOnlyWithOffersMade(t *testing.T) {
	f := newFx(t)
	f.project("q")
	f.project("r")
	projectOf := map[uuid.UUID]string{}
	for _, p := range []string{"p", "q", "r"} {
		for _, id := range f.queue(p, 4) {
			projectOf[id] = p
		}
	}
	c := f.token("w")
	full := f.session(c, 1, nil)
	if o := f.place(c, full, 1); len(o) != 1 { // its one slot taken by a live offer
		t.Fatalf("the full session's offer: %d offers, want 1", len(o))
	}
	work := f.session(c, 10, nil)
	pl := dispatch.NewPlacer(f.store, nil)
	seen := map[string]int{}
	for pass := range 3 {
		if o, err := pl.PlaceFor(bg, c, full, 1, nil); err != nil || len(o) != 0 {
			t.Fatalf("pass %d: the full session got %d offers (%v), want none", pass, len(o), err)
		}
		o, err := pl.PlaceFor(bg, c, work, 1, nil)
		if err != nil || len(o) != 1 {
			t.Fatalf("pass %d: the working session got %d offers (%v), want 1", pass, len(o), err)
		}
		seen[projectOf[o[0].RunID]]++
	}
	if len(seen) != 3 {
		t.Fatalf("the working session's three offers came from %v, want one from each of the three projects", seen)
	}
}
