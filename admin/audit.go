package admin

import (
	"context"
	"fmt"

	"github.com/qlcontrol/controlcore/db"
)

// TriggerAudit is the exactly-once audit of one trigger's admitted occurrences: every occurrence
// must have one Run (Duplicates 0), admitted with Attempt 1 and the Events run.created and
// run.queued, its Attempts numbered 1 … n (Misshapen 0): before dispatch and after.
type TriggerAudit struct {
	ProjectID, TriggerID string
	Runs, Occurrences    int64
	Duplicates           int64 // Runs beyond the first for an occurrence of the same revision
	Misshapen            int64 // Runs not admitted as one Run with Attempt 1, run.created and run.queued
	FirstMs, LastMs      int64 // the first and last scheduled occurrence
	LagP50Ms             float64
	LagMaxMs             int64
}

// Problems is the number of duplicate and misshapen Runs: 0 when the trigger was admitted exactly once.
func (a TriggerAudit) Problems() int64 { return a.Duplicates + a.Misshapen }

// ExactlyOnce audits every trigger that has Runs, in one snapshot, ordered by project and trigger.
func (r *Reader) ExactlyOnce(ctx context.Context) ([]TriggerAudit, error) {
	var out []TriggerAudit
	err := r.snapshot(ctx, func(q *db.Queries) error {
		rows, err := q.AuditExactlyOnce(ctx)
		if err != nil {
			return fmt.Errorf("exactly-once audit: %w", err)
		}
		out = make([]TriggerAudit, 0, len(rows))
		for _, x := range rows {
			out = append(out, TriggerAudit{ProjectID: x.ProjectID, TriggerID: x.TriggerID, Runs: x.Runs,
				Occurrences: x.Occurrences, Duplicates: x.Duplicates, Misshapen: x.Misshapen, FirstMs: x.FirstMs,
				LastMs: x.LastMs, LagP50Ms: x.LagP50Ms, LagMaxMs: x.LagMaxMs})
		}
		return nil
	})
	return out, err
}
