package admin

import (
	"context"
	"fmt"

	"github.com/qlcontrol/controlcore/db"
)

// readQueues reads every project's queue for the overview (sql/queries/console_loop.sql): the
// queued Runs up to CountCap and the head's ready time, from the queue's partial index only.
func readQueues(ctx context.Context, q *db.Queries) ([]db.ConsoleQueueDepthRow, error) {
	rows, err := q.ConsoleQueueDepth(ctx, CountCap)
	if err != nil {
		return nil, fmt.Errorf("read queue depth: %w", err)
	}
	return rows, nil
}
