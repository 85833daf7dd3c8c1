package verify

import (
	"context"
	"fmt"
	"strings"

	"github.com/qlcontrol/controlcore/roles"
)

// NotReadyError lists the drift that keeps a replica from starting.
type NotReadyError struct{ Findings []Finding }

// shownFindings bounds the message: a half-migrated database lacks hundreds of contract facts.
const shownFindings = 8

func (e *NotReadyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "database not ready for the scheduler: %d finding(s)", len(e.Findings))
	for i, f := range e.Findings {
		if i == shownFindings {
			fmt.Fprintf(&b, "; and %d more", len(e.Findings)-i)
			break
		}
		fmt.Fprintf(&b, "; %s: %s", f.Object, f.Message)
		if f.Fix != "" {
			fmt.Fprintf(&b, " (fix: %s)", f.Fix)
		}
	}
	b.WriteString("; `qlmigrate verify` reports them all and `qlmigrate verify --fix-sql` prints the fix")
	return b.String()
}

// Readiness is `qlsched run`'s readiness: verify in ScopeRuntime, on the runtime role's own
// connection, through the same code path as `qlmigrate verify`. It returns a *NotReadyError on
// any drift that touches what the runtime reads or writes.
func Readiness(ctx context.Context, conn Beginner, names roles.Names) error {
	r, err := Run(ctx, conn, Options{Names: names, Scope: ScopeRuntime})
	if err != nil {
		return fmt.Errorf("readiness: %w", err)
	}
	if r.OK {
		return nil
	}
	var drift []Finding
	for _, c := range r.Checks {
		for _, f := range c.Findings {
			if f.Severity == SeverityDrift {
				drift = append(drift, f)
			}
		}
	}
	return &NotReadyError{Findings: drift}
}
