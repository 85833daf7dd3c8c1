package admin

import (
	"context"
	"fmt"

	"github.com/qlcontrol/controlcore/db"
)

// LoopCheck is one invariant of the closed loop and the number of rows that break it.
type LoopCheck struct {
	Name       string
	Violations int64
}

// RunStateCount is how many Runs of a task are in a state, and their Attempts.
type RunStateCount struct {
	TaskID, State  string
	Runs, Attempts int64
}

// LoopAudit is the execution audit: the closed loop's invariants (issue 32, design §6) and the
// Runs per task and state, read in one snapshot.
type LoopAudit struct {
	Checks []LoopCheck
	States []RunStateCount
}

// Violations is the number of rows breaking any invariant: 0 when the loop is sound.
func (a LoopAudit) Violations() int64 {
	var n int64
	for _, c := range a.Checks {
		n += c.Violations
	}
	return n
}

// Runs is the number of Runs of task (every task when "") in state.
func (a LoopAudit) Runs(task, state string) int64 {
	var n int64
	for _, s := range a.States {
		if (task == "" || s.TaskID == task) && s.State == state {
			n += s.Runs
		}
	}
	return n
}

// LoopAudit reads the execution audit in one snapshot.
func (r *Reader) LoopAudit(ctx context.Context) (LoopAudit, error) {
	var out LoopAudit
	err := r.snapshot(ctx, func(q *db.Queries) error {
		checks, err := q.LoopAuditChecks(ctx)
		if err != nil {
			return fmt.Errorf("loop audit: %w", err)
		}
		states, err := q.LoopAuditRunStates(ctx)
		if err != nil {
			return fmt.Errorf("loop audit: %w", err)
		}
		out.Checks = make([]LoopCheck, 0, len(checks))
		for _, c := range checks {
			out.Checks = append(out.Checks, LoopCheck{Name: c.CheckName, Violations: c.Violations})
		}
		out.States = make([]RunStateCount, 0, len(states))
		for _, s := range states {
			out.States = append(out.States, RunStateCount{TaskID: s.TaskID, State: s.State, Runs: s.Runs, Attempts: s.Attempts})
		}
		return nil
	})
	return out, err
}
