package metrics

import (
	"context"
	"fmt"
	"time"

	"github.com/qlcontrol/controlcore/db"
)

// BacklogCap bounds the backlog count: past it the gauge stays at the cap (and its derivative at
// 0), so alert on the oldest occurrence's age too, not only on the count's growth.
const BacklogCap = 100_000

// DatabaseBacklog reads the backlog gauge from the database: the schedule rows a claim would take
// right now (see sql/queries/status.sql), counted along the claim's index and capped at
// BacklogCap, and the age of the oldest due one by database time.
func DatabaseBacklog(conn db.DBTX) BacklogFunc {
	q := db.New(conn)
	return func(ctx context.Context) (int64, time.Duration, error) {
		b, err := q.Backlog(ctx, BacklogCap)
		if err != nil {
			return 0, 0, fmt.Errorf("backlog: %w", err)
		}
		var age time.Duration
		if b.OldestDueMs >= 0 && b.DueUnclaimed > 0 {
			age = time.Duration(b.NowMs-b.OldestDueMs) * time.Millisecond
		}
		return b.DueUnclaimed, age, nil
	}
}
