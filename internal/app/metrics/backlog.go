package metrics

import (
	"context"
	"fmt"
	"time"

	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
)

// BacklogCap bounds the backlog count: past it the gauge stays at the cap (and its derivative at
// 0), so alert on the oldest occurrence's age too, not only on the count's growth. The count of
// rows waiting for initialisation is within the same cap (they are the first rows counted).
const BacklogCap = 100_000

// Backlog is one reading of the database gauges.
type Backlog struct {
	Due       int64         // schedule rows a claim would take now, up to BacklogCap
	OldestAge time.Duration // age of the oldest due occurrence among them (0 when none)
	// Uninitialised: those of the rows that wait for initialisation (no cursor yet), and how long
	// the oldest of them has waited since it was published (or last claimed without being
	// initialised); 0 when none.
	Uninitialised          int64
	OldestUninitialisedAge time.Duration
}

// DatabaseBacklog reads the backlog gauges from the database: the schedule rows a claim would
// take right now (see sql/queries/status.sql), counted along the claim's index and capped at
// BacklogCap, the age of the oldest due one by database time, and the uninitialised ones. Each
// read runs through the handle (behind a pooler in a transaction that runs its prologue first).
func DatabaseBacklog(h *dbconn.DB) BacklogFunc {
	return func(ctx context.Context) (Backlog, error) {
		var b db.BacklogRow
		err := h.Run(ctx, func(q dbconn.Querier) (err error) {
			b, err = db.New(q).Backlog(ctx, BacklogCap)
			return err
		})
		if err != nil {
			return Backlog{}, fmt.Errorf("backlog: %w", err)
		}
		r := Backlog{Due: b.DueUnclaimed, Uninitialised: b.Uninitialised}
		if b.OldestDueMs >= 0 && b.DueUnclaimed > 0 {
			r.OldestAge = time.Duration(b.NowMs-b.OldestDueMs) * time.Millisecond
		}
		if b.OldestUninitialisedMs >= 0 && b.Uninitialised > 0 {
			r.OldestUninitialisedAge = time.Duration(max(b.NowMs-b.OldestUninitialisedMs, 0)) * time.Millisecond
		}
		return r, nil
	}
}
