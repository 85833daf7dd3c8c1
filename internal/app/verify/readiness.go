package verify

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/qlcontrol/controlcore/internal/base/sqlfile"
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
			fmt.Fprintf(&b, "\n  … and %d more", len(e.Findings)-i)
			break
		}
		fmt.Fprintf(&b, "\n  - %s: %s", sqlfile.CommentText(f.Object), sqlfile.CommentText(f.Message))
		if f.Fix != "" {
			fmt.Fprintf(&b, "\n    fix: %s", sqlfile.CommentText(f.Fix))
		}
	}
	b.WriteString("\n`qlmigrate verify` reports them all; `qlmigrate verify --fix-sql` prints the statements that remove them")
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
	// What is missing says most (a partly migrated database lacks whole tables, and each of
	// their columns and keys would be a finding too): capability and missing objects first.
	slices.SortStableFunc(drift, func(a, b Finding) int { return headline(a) - headline(b) })
	return &NotReadyError{Findings: drift}
}

func headline(f Finding) int {
	switch f.Kind {
	case "missing_schema", "capability_changed", "missing_capability", "connected_role":
		return 0
	case "missing_table", "missing_function":
		return 1
	default:
		return 2
	}
}
