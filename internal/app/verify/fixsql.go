package verify

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/qlcontrol/controlcore/internal/base/sqlfile"
	"github.com/qlcontrol/controlcore/roles"
)

// WriteFixSQL writes one script that removes every drift finding that has statements, in one
// transaction, for a DBA to review and run as a superuser (`psql -v ON_ERROR_STOP=1 -f`); the
// tool never runs it. Findings with no safe statement (a dropped column's data, a ledger that
// does not match) are listed at the end as comments, with what to do instead. Nothing is written
// when there is no drift.
//
// ALTER SYSTEM statements (a server-wide setting) cannot run in a transaction block: they come
// first, before the transaction, each on its own.
//
// Order: the database's and roles' settings first (a database-level
// default_transaction_read_only makes the fixing session read-only, and its fix must come
// before any write), then the schema, then the rest of the privileges in roles.DriftKinds order.
func WriteFixSQL(w io.Writer, r *Report) error {
	var fix, manual, system []Finding
	for _, c := range r.Checks {
		for _, f := range c.Findings {
			switch {
			case f.Severity != SeverityDrift:
			case len(f.SQL) > 0 && strings.HasPrefix(f.SQL[0], "ALTER SYSTEM"):
				system = append(system, f)
			case len(f.SQL) > 0:
				fix = append(fix, f)
			default:
				manual = append(manual, f)
			}
		}
	}
	if len(fix)+len(manual)+len(system) == 0 {
		return nil
	}
	slices.SortStableFunc(fix, func(a, b Finding) int { return fixRank(a) - fixRank(b) })
	var b strings.Builder
	target := r.Target
	if target == "" {
		target = r.Database
	}
	fmt.Fprintf(&b, "-- qlmigrate verify --fix-sql: %s (PostgreSQL %s), %d finding(s) with statements, %d without.\n",
		sqlfile.CommentText(target), sqlfile.CommentText(r.ServerVersion), len(fix)+len(system), len(manual))
	b.WriteString("-- Review, then run as a superuser: psql -v ON_ERROR_STOP=1 -f fix.sql (all or nothing).\n")
	if len(system) > 0 {
		// First: a server-wide default_transaction_read_only would make the transaction below
		// read-only. psql -f sends each statement by itself, so these run outside it.
		b.WriteString("-- ALTER SYSTEM cannot run inside a transaction block: these run first, each on its own.\n")
		writeFixes(&b, system)
	}
	if len(fix) > 0 {
		b.WriteString("BEGIN;\n")
		writeFixes(&b, fix)
		b.WriteString("COMMIT;\n")
	}
	if len(manual) > 0 {
		b.WriteString("-- Not fixed by this script (no safe statement):\n")
		for _, f := range manual {
			fmt.Fprintf(&b, "--   %s: %s: %s\n", sqlfile.CommentText(f.Kind), sqlfile.CommentText(f.Object), sqlfile.CommentText(f.Message))
			if f.Fix != "" {
				fmt.Fprintf(&b, "--     what to do: %s\n", sqlfile.CommentText(f.Fix))
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeFixes(b *strings.Builder, fix []Finding) {
	for _, f := range fix {
		fmt.Fprintf(b, "-- %s: %s\n", sqlfile.CommentText(f.Kind), sqlfile.CommentText(f.Object))
		for _, stmt := range f.SQL {
			b.WriteString(stmt)
			if !strings.HasSuffix(strings.TrimSpace(stmt), ";") {
				b.WriteString(";")
			}
			b.WriteString("\n")
		}
	}
}

// fixRank orders fixes: settings, then the schema, then privileges by roles.DriftKinds.
func fixRank(f Finding) int {
	i := slices.Index(roles.DriftKinds, f.Kind)
	switch {
	case f.Kind == "database_setting" || f.Kind == "role_setting":
		return i
	case i < 0: // a schema finding
		return len(roles.DriftKinds)
	default:
		return len(roles.DriftKinds) + 1 + i
	}
}
