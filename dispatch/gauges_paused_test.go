package dispatch_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/dispatch"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// A paused project's queue does not spend LoopQueue's budget of counted Runs: with a paused
// project first in project order holding a backlog at least the budget, every active project
// after it counted 1, whatever its queue (its depth gauge said 1 during the incident that paused
// the other). The budget is lowered to 3 through the statement's own parameter.
func TestGaugesPausedProjectSpendsNoBudget(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	ctx := context.Background()
	f.project("a")
	f.queue("a", 3)
	f.exec(`UPDATE control_core.projects SET state = 'paused' WHERE project_id = 'a'`)
	f.queue("p", 3)
	rows, err := f.su.Query(ctx, fmt.Sprintf("SELECT project_id, queued FROM (%s) q", testpg.Query(t, "LoopQueue")), 3, dispatch.GaugeMaxProjects)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var p string
		var n int64
		err := r.Scan(&p, &n)
		return fmt.Sprintf("%s=%d", p, n), err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "p=3" {
		t.Errorf("queues %v; want [p=3] (the paused project's 3 queued Runs spend no budget)", got)
	}
}
