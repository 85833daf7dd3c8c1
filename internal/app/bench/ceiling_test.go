package bench

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// The ceiling writes every due row once in both modes, the single mode's claims carried behind
// its writes (Store.WriteThenClaim) as a single-mode replica's are behind its admits: a carried
// claim that was dropped or handled twice would leave rows claimed and unwritten, or write one
// occurrence twice (the runs key refuses that, failing the phase).
func TestTheCeilingWritesEachDueRowOnce(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{1, 16} {
		ctx := context.Background()
		d := testpg.New(t)
		admin, rt := d.Handle(t, ""), d.Config(t, "")
		const triggers = 120
		cfg := Config{Scenario: Backlog, Every: "minute", Triggers: triggers}
		period, err := publish(ctx, admin, "p", cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := setDue(ctx, admin, "p", period, t.Logf); err != nil {
			t.Fatal(err)
		}
		var pools []*dbconn.DB
		for range 2 {
			rt := rt.For(rt.Pool.ConnConfig.Database, "")
			maps.Copy(rt.Pool.ConnConfig.RuntimeParams, coordinator.HotSettings())
			p, err := rt.Open(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			pools = append(pools, p)
		}
		n, _, err := ceiling(ctx, pools, "p", period, time.Minute, batch, ceilingEpochMs, triggers)
		var runs, distinct, held int64
		if qerr := admin.Pool().QueryRow(ctx, `SELECT count(*), count(DISTINCT trigger_id),
			(SELECT count(*) FROM control_core.trigger_schedules WHERE claim_owner LIKE 'ceiling-%' AND claim_expires_at_ms > control_core.db_now_ms())
			FROM control_core.runs WHERE scheduled_for_ms >= $1`, ceilingEpochMs).Scan(&runs, &distinct, &held); qerr != nil {
			t.Fatal(qerr)
		}
		if err != nil || n != triggers || runs != triggers || distinct != triggers || held != 0 {
			t.Errorf("batch %d: wrote %d (%v), %d Runs of %d triggers, %d claims held; want %d each once and no claim left", batch, n, err, runs, distinct, held, triggers)
		}
	}
}
