package coordinator

import (
	"context"
	"testing"
)

// The recovery source is runtime-owned Runs only (ADR-0105: "the parent Run is runtime-owned"): an
// operator's Run is never a candidate at all, not merely one that failing closed leaves alone, and
// a pristine admitted Run is none either. The report counts candidates, so the source itself is
// what this checks, not only what FailClosed then writes.
func TestRecoverySourceHoldsOnlyRuntimeOwnedDriftedRuns(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, drift string
		want        RecoveryReport
	}{
		{"pristine", "", RecoveryReport{}},
		{"operator-owned, cancel requested", `UPDATE control_core.runs SET owner = 'operator', cancel_requested_at_ms = 1`, RecoveryReport{}},
		{"operator-owned, queued and drifted", `UPDATE control_core.runs SET owner = 'operator';
			UPDATE control_core.attempts SET worker_id = 'w1'`, RecoveryReport{}},
		{"runtime-owned, drifted", `UPDATE control_core.attempts SET worker_id = 'w1'`, RecoveryReport{Candidates: 1, FailedClosed: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := admittedOnce(t)
			for _, stmt := range splitStatements(tc.drift) {
				if stmt != "" {
					f.exec(stmt)
				}
			}
			rep, err := Recover(context.Background(), f.rt, testLogger())
			if err != nil {
				t.Fatal(err)
			}
			if rep != tc.want {
				t.Errorf("recovery report %+v, want %+v", rep, tc.want)
			}
		})
	}
}
