package dispatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/dispatch"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// Gauges reads each active project's queue (depth, its oldest Run's age by database time) and the
// live sessions: active and draining counted, expired ones not, free capacity net of live offers
// and active leases; a paused project's queue is left out (placement never takes it).
func TestGaugesQueueAndSessions(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	ctx := context.Background()
	f.queue("p", 3) // queued 100 s ago (less 1 … 3 ms)
	f.project("z")
	f.queue("z", 1)
	f.exec(`UPDATE control_core.projects SET state = 'paused' WHERE project_id = 'z'`)
	g, err := f.store.Gauges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Queues) != 1 || g.Queues[0].ProjectID != "p" || g.Queues[0].Queued != 3 ||
		g.Queues[0].OldestAge < 99990*time.Millisecond || g.Queues[0].OldestAge > 110*time.Second {
		t.Errorf("queues %+v; want p alone, 3 queued, the oldest about 100 s old", g.Queues)
	}
	if g.ActiveSessions != 0 || g.DrainingSessions != 0 || g.FreeCapacity != 0 {
		t.Errorf("sessions %+v; want none", g)
	}

	c := f.token("w")
	s := f.session(c, 3, nil)
	_, off, _ := f.running(c) // a session of capacity 1 holding a lease: no free slot
	if offers := f.place(c, s, 1); len(offers) != 1 {
		t.Fatalf("placed %d offers; want 1", len(offers))
	}
	if _, err := f.store.Ack(ctx, c, f.place(c, s, 1)[0].OfferID, s.ID, ""); err == nil {
		t.Fatal("an ACK with no callback token was accepted")
	}
	drained := f.session(c, 2, nil)
	if _, err := f.store.Drain(ctx, c, drained.ID); err != nil {
		t.Fatal(err)
	}
	gone := f.session(c, 4, nil)
	f.expireSession(gone.ID)
	g, err = f.store.Gauges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// s: 3 − 2 live offers; the running session: 1 − 1 lease; drained and expired ones: none
	if g.ActiveSessions != 2 || g.DrainingSessions != 1 || g.FreeCapacity != 1 {
		t.Errorf("sessions: %d active, %d draining, %d free; want 2, 1, 1 (offer %s)", g.ActiveSessions, g.DrainingSessions, g.FreeCapacity, off.OfferID)
	}
	if len(g.Queues) != 0 {
		t.Errorf("queues %+v; want none (p's three Runs are offered or running)", g.Queues)
	}
}

// LoopQueue reads the queue through runs_dispatch_queue_idx, never the history (50,000 finished
// Runs beside 40 projects of queued ones), and keeps its bounds: one budget of queued Runs over the
// whole read (a project past it counts 1), and at most max_projects projects.
func TestGaugesReadNoHistory(t *testing.T) {
	f := newFx(t)
	ctx := context.Background()
	f.history()
	conn, err := f.su.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "PREPARE loop_queue AS "+testpg.Query(t, "LoopQueue")); err != nil {
		t.Fatal(err)
	}
	var plan []byte
	// cap, max_projects
	if err := conn.QueryRow(ctx, fmt.Sprintf(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE loop_queue(%d, %d)`,
		dispatch.GaugeQueueCap, dispatch.GaugeMaxProjects)).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	var doc []struct {
		Plan map[string]any `json:"Plan"`
	}
	if err := json.Unmarshal(plan, &doc); err != nil {
		t.Fatal(err)
	}
	root := doc[0].Plan
	pages := root["Shared Hit Blocks"].(float64) + root["Shared Read Blocks"].(float64)
	var seqRuns, queueIdx bool
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		seqRuns = seqRuns || n["Node Type"] == "Seq Scan" && n["Relation Name"] == "runs"
		queueIdx = queueIdx || n["Index Name"] == "runs_dispatch_queue_idx"
		kids, _ := n["Plans"].([]any)
		for _, k := range kids {
			walk(k.(map[string]any))
		}
	}
	walk(root)
	if seqRuns || !queueIdx || root["Actual Rows"].(float64) != 40 || pages > 1000 {
		t.Fatalf("LoopQueue: %v rows, %v pages; plan:\n%s", root["Actual Rows"], pages, plan)
	}
	t.Logf("%v pages", pages)

	read := func(budget, projects int) []int64 {
		t.Helper()
		rows, err := conn.Query(ctx, fmt.Sprintf(`EXECUTE loop_queue(%d, %d)`, budget, projects))
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (int64, error) {
			var p string
			var n, oldest, now int64
			err := r.Scan(&p, &n, &oldest, &now)
			return n, err
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// in project order q1, q10, q11, …: 10 + 10 + 5 spend a budget of 25, then 1 each
	got := read(25, 500)
	if len(got) != 40 || got[0] != 10 || got[1] != 10 || got[2] != 5 || got[3] != 1 || got[39] != 1 {
		t.Errorf("budget 25: counts %v; want 10, 10, 5, then 1 for each of the other 37 projects", got)
	}
	if got := read(100000, 3); len(got) != 3 || got[0] != 10 {
		t.Errorf("3 projects at most: counts %v", got)
	}
}
