package verify

import (
	"fmt"
	"io"
	"strings"

	"github.com/qlcontrol/controlcore/internal/base/sqlfile"
)

// WriteText renders the report for a person: one block per check, each finding with the object
// it names and its fix, and a last line that says whether the database passed.
func WriteText(w io.Writer, r *Report) error {
	var b strings.Builder
	target := r.Target
	if target == "" {
		target = r.Database
	}
	fmt.Fprintf(&b, "verify %s (PostgreSQL %s): expecting %s v%d / %s, %d migrations\n\n",
		target, r.ServerVersion, r.Expected.Component, r.Expected.Capability, r.Expected.Name, r.Expected.Migrations)
	for _, c := range r.Checks {
		drift, notes := 0, 0
		for _, f := range c.Findings {
			if f.Severity == SeverityDrift {
				drift++
			} else {
				notes++
			}
		}
		status := "ok"
		switch c.Status {
		case StatusDrift:
			status = fmt.Sprintf("DRIFT (%d)", drift)
		case StatusSkipped:
			status = "skipped: " + c.Reason
		}
		if c.Status != StatusSkipped && c.Reason != "" { // a check that ran in part says which part
			status += " (" + c.Reason + ")"
		}
		if notes > 0 {
			status += fmt.Sprintf(", %d note(s)", notes)
		}
		fmt.Fprintf(&b, "%-17s %s\n", c.Name, status)
		for _, f := range c.Findings {
			fmt.Fprintf(&b, "  %-5s %s: %s\n", f.Severity, sqlfile.CommentText(f.Object), sqlfile.CommentText(f.Message))
			if f.Fix != "" {
				fmt.Fprintf(&b, "        fix: %s\n", sqlfile.CommentText(f.Fix))
			}
		}
	}
	if r.OK {
		fmt.Fprintf(&b, "\nOK: no drift (%d note(s), %.1f ms)\n", r.Summary.Notes, r.ElapsedMs)
	} else {
		fmt.Fprintf(&b, "\nDRIFT: %d finding(s) (%d note(s)); `qlmigrate verify --fix-sql` prints the statements that remove them\n",
			r.Summary.Drift, r.Summary.Notes)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
