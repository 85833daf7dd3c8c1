package checksums

import (
	"fmt"
	"sort"
	"strings"
)

// Drift is one finding of a check of this package: what is wrong, naming the object, and how to
// fix it. Reports print the Object before the Message ("pg-0003-…: changed (statements): …"), so
// the Message does not repeat it. A Note is reported but is not drift (it does not fail verify).
type Drift struct {
	Kind    string // e.g. file_edited, changed_checksum, unknown_version, pending
	Object  string // the file, migration or version, named as a DBA looks it up
	Message string
	Fix     string // what to do, in words (it holds SQL's statements too, where there are any)
	// SQL holds the statements that remove the drift, each ending in ";", for a superuser to run
	// in one transaction in this order; empty where no safe statement exists (Fix says why).
	SQL  []string
	Note bool
}

// IntegrityDrift turns the problems of CheckSum on the binary's own stream into findings.
func IntegrityDrift(problems []SumProblem) []Drift {
	out := make([]Drift, 0, len(problems))
	for _, p := range problems {
		out = append(out, Drift{
			Kind: "file_" + string(p.Kind), Object: p.File, Message: p.String(),
			Fix: "this binary was built from a tree whose migrations do not match " + SumFileName +
				": rebuild it from a commit where `qlmigrate hash --check` passes",
		})
	}
	return out
}

// LedgerRow is one row of control_core.migration_ledger.
type LedgerRow struct {
	Version int64
	Name    string
	SHA256  string
	Normal  string // normalized_sha256
}

// Stream is what the database says was applied: goose's applied versions and the ledger.
type Stream struct {
	Applied []int64 // versions goose records as applied
	Ledger  []LedgerRow
}

// StreamDrift compares the database's record of applied migrations with the migrations of the
// binary. It returns three lists, one per check of verify:
//   - ledger: an applied migration whose ledger sha256 (or name) differs from the file in the
//     binary (the file was edited after it ran: changed_cosmetic when the normal forms agree,
//     changed_checksum when a statement differs), or that has no ledger row; a sha256 that
//     ReleasedTexts documents is a released_text note, not drift;
//   - unknown: a version applied (in goose's table or the ledger) that the binary does not know;
//   - pending: a migration of the binary that is not applied.
func StreamDrift(migrations []Migration, s Stream) (ledger, unknown, pending []Drift) {
	known := make(map[int64]Migration, len(migrations))
	for _, m := range migrations {
		known[m.Version] = m
	}
	applied := map[int64]bool{}
	for _, v := range s.Applied {
		applied[v] = true
	}
	names := make(map[int64]string, len(migrations))
	for _, m := range migrations {
		names[m.Version] = m.Name
	}
	rows := map[int64]LedgerRow{}
	for _, r := range s.Ledger {
		rows[r.Version] = r
	}
	for _, m := range migrations {
		row, hasRow := rows[m.Version]
		switch {
		case !applied[m.Version] && !hasRow:
			pending = append(pending, Drift{Kind: "pending", Object: m.Name,
				Message: fmt.Sprintf("not applied (%s)", m.File),
				Fix:     "run `qlmigrate up` (or pass --allow-pending while a rollout is in progress)"})
		case !applied[m.Version]:
			ledger = append(ledger, Drift{Kind: "ledger_without_version", Object: m.Name,
				Message: "has a ledger row but goose's table does not record it as applied",
				Fix: fmt.Sprintf("find out who removed version %d from control_core.goose_db_version; "+
					"if the migration's objects exist, re-insert it (INSERT INTO control_core.goose_db_version (version_id, is_applied) VALUES (%d, true))", m.Version, m.Version)})
		case !hasRow:
			ledger = append(ledger, Drift{Kind: "missing_checksum", Object: m.Name,
				Message: "applied but has no checksum-ledger row: what ran cannot be proven",
				Fix:     "compare the schema with the migration by hand, then restore the ledger row from a backup"})
		case row.SHA256 != m.SHA256 && row.Name == m.Name && isReleased(m.Version, row.SHA256):
			r, _ := ReleasedTextOf(m.Version, row.SHA256)
			ledger = append(ledger, releasedNote(m, r, names))
		case row.SHA256 != m.SHA256 && row.Normal == m.Normal:
			ledger = append(ledger, Drift{Kind: "changed_cosmetic", Object: m.Name,
				Message: fmt.Sprintf("changed (comments/whitespace only): the ledger holds sha256 %s, the file in this binary has %s, and both have the same statements (normal form %s)",
					short(row.SHA256), short(m.SHA256), short(m.Normal)),
				Fix: fmt.Sprintf("restore %s as it was applied, or record the edit: qlmigrate accept --version %d --reason '…'", m.File, m.Version)})
		case row.SHA256 != m.SHA256:
			ledger = append(ledger, Drift{Kind: "changed_checksum", Object: m.Name,
				Message: fmt.Sprintf("changed (statements): the ledger recorded sha256 %s when it ran, the file in this binary has %s and other statements: the file was edited after it was applied",
					short(row.SHA256), short(m.SHA256)),
				Fix: fmt.Sprintf("restore %s as it was applied and put any change in a new migration (a statement edit cannot be accepted)", m.File)})
		case row.Name != m.Name:
			ledger = append(ledger, Drift{Kind: "changed_name", Object: m.Name,
				Message: fmt.Sprintf("version %d ran as %s: the file was renamed after it was applied", m.Version, row.Name),
				Fix:     fmt.Sprintf("rename %s back; a migration's name never changes", m.File)})
		}
	}
	unknownVersions := map[int64]string{}
	for v := range applied {
		if _, ok := known[v]; !ok {
			unknownVersions[v] = "goose's table"
		}
	}
	for v, r := range rows {
		if _, ok := known[v]; !ok {
			if where, dup := unknownVersions[v]; dup {
				unknownVersions[v] = where + " and the ledger (as " + r.Name + ")"
			} else {
				unknownVersions[v] = "the ledger (as " + r.Name + ")"
			}
		}
	}
	versions := make([]int64, 0, len(unknownVersions))
	for v := range unknownVersions {
		versions = append(versions, v)
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i] < versions[j] })
	last := int64(0)
	if len(migrations) > 0 {
		last = migrations[len(migrations)-1].Version
	}
	for _, v := range versions {
		unknown = append(unknown, Drift{Kind: "unknown_version", Object: fmt.Sprintf("version %d", v),
			Message: fmt.Sprintf("applied (in %s) but this binary does not know it (it ships 1 … %d)", unknownVersions[v], last),
			Fix:     "run the qlmigrate that shipped it (a newer binary applied it), or remove the version if it was inserted by hand"})
	}
	return ledger, unknown, pending
}

func isReleased(version int64, sha256 string) bool {
	_, ok := ReleasedTextOf(version, sha256)
	return ok
}

func short(sum string) string {
	if len(sum) > 12 {
		return sum[:12] + "…"
	}
	return strings.TrimSpace(sum)
}
