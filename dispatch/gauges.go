package dispatch

import (
	"context"
	"time"

	"github.com/qlcontrol/controlcore/db"
)

// The bounds of one Gauges read (sql/queries/loop_metrics.sql).
const (
	// GaugeQueueCap is the budget of queued Runs one read counts, over all projects: each project's
	// count is exact until it is spent, past it a project counts at most 1 ("at least one").
	GaugeQueueCap = 100_000
	// GaugeMaxProjects bounds the projects (the label's values) one read reports, in project order.
	GaugeMaxProjects = 500
	// GaugeSessionCap bounds the live sessions one read counts.
	GaugeSessionCap = 10_000
)

// ProjectQueue is one project's queue in a Gauges reading.
type ProjectQueue struct {
	ProjectID string
	Queued    int64         // queued Runs, counted within GaugeQueueCap
	OldestAge time.Duration // how long its oldest queued Run has been ready, by database time (0: none ready yet)
}

// Gauges is one reading of the closed loop's database gauges: global facts, the same whichever
// dispatcher reads them.
type Gauges struct {
	Queues           []ProjectQueue // active projects with queued Runs, at most GaugeMaxProjects, by project id
	ActiveSessions   int64          // live (unexpired) sessions taking offers
	DrainingSessions int64          // live sessions draining (their leases continue, no new offers)
	FreeCapacity     int64          // the active sessions' capacity minus their live offers and active leases
}

// Gauges reads the queue per project and the live sessions, two bounded statements that walk only
// the partial indexes of live rows (never history).
func (s *Store) Gauges(ctx context.Context) (Gauges, error) {
	var g Gauges
	var queue []db.LoopQueueRow
	if err := s.run(ctx, "queue gauges", func(q *db.Queries) error {
		var e error
		queue, e = q.LoopQueue(ctx, db.LoopQueueParams{Cap: GaugeQueueCap, MaxProjects: GaugeMaxProjects})
		return e
	}); err != nil {
		return Gauges{}, err
	}
	g.Queues = make([]ProjectQueue, len(queue))
	for i, r := range queue {
		g.Queues[i] = ProjectQueue{ProjectID: r.ProjectID, Queued: r.Queued,
			OldestAge: time.Duration(max(r.NowMs-r.OldestReadyMs, 0)) * time.Millisecond}
	}
	var w db.LoopWorkersRow
	if err := s.run(ctx, "worker gauges", func(q *db.Queries) error {
		var e error
		w, e = q.LoopWorkers(ctx, GaugeSessionCap)
		return e
	}); err != nil {
		return Gauges{}, err
	}
	g.ActiveSessions, g.DrainingSessions, g.FreeCapacity = w.Active, w.Draining, w.FreeCapacity
	return g, nil
}
