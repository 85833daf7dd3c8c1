package dispatch_test

import (
	"context"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/dispatch"
)

// offeredRuns is the Runs of offers, in offer order.
func offeredRuns(offers []dispatch.Offer) []uuid.UUID {
	ids := make([]uuid.UUID, len(offers))
	for i, o := range offers {
		ids[i] = o.RunID
	}
	return ids
}

// Issue 33: two dispatchers woken by one admission read the same oldest Runs; the one whose
// Offer meets them locked by the other's offer in flight (SKIP LOCKED) fills its poll from the
// Runs after them in the same pass, never more than the poll's slots.
func TestPlaceFillsFromRunsAfterLockedCandidates(t *testing.T) {
	for _, tc := range []struct {
		name            string
		capacity, slots int
	}{
		{"the poll asks for the session's capacity", 2, 2},
		{"the poll asks for less than the session's capacity", 4, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFx(t)
			ids := f.queue("p", 5)
			// the other dispatcher's offer in flight: the two oldest Runs locked, not yet committed
			tx, err := f.su.Begin(bg)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(context.Background()) }()
			rows, err := tx.Query(bg, `SELECT run_id FROM control_core.runs WHERE run_id = ANY($1) FOR UPDATE`, ids[:2])
			if err != nil {
				t.Fatal(err)
			}
			if locked, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID]); err != nil || len(locked) != 2 {
				t.Fatalf("lock the two oldest Runs: %v %v", locked, err)
			}
			c := f.token("w")
			s := f.session(c, tc.capacity, nil)
			pl := dispatch.NewPlacer(f.store, nil)
			got, err := pl.PlaceFor(bg, c, s, tc.slots, nil)
			if err != nil {
				t.Fatal(err)
			}
			if want := ids[2:4]; !slices.Equal(offeredRuns(got), want) {
				t.Fatalf("offered %v with the two oldest locked elsewhere, want the next two %v in this pass", offeredRuns(got), want)
			}
			if n := f.count(`SELECT count(*) FROM control_core.dispatch_offers`); n != tc.slots {
				t.Fatalf("%d offers written, want the poll's %d slots", n, tc.slots)
			}
		})
	}
}

// Issue 33: when every Run read was offered by another dispatcher between the read and the
// Offer (raced away), the placement reads again at once and offers the Runs after them.
func TestPlaceReadsAgainWhenCandidatesRacedAway(t *testing.T) {
	f := newFx(t)
	ids := f.queue("p", 3)
	c := f.token("w")
	other := f.session(c, 2, nil)
	s := f.session(c, 1, nil)
	pl := dispatch.NewPlacer(f.store, nil)
	reads := 0
	got, err := pl.PlaceFor(bg, c, s, 1, func(read int) {
		reads = read
		if read == 1 { // the other dispatcher offers what this read found, before this Offer
			if o := f.place(c, other, 2); !slices.Equal(offeredRuns(o), ids[:2]) {
				t.Fatalf("the other session's offers: %v, want %v", offeredRuns(o), ids[:2])
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := ids[2:3]; !slices.Equal(offeredRuns(got), want) {
		t.Fatalf("offered %v after %d reads with the candidates raced away, want %v in this pass", offeredRuns(got), reads, want)
	}
	if reads != 2 {
		t.Fatalf("%d candidate reads, want 2", reads)
	}
}
