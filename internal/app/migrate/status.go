package migrate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/checksums"
	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/app/verify"
)

// ChecksumState compares an applied migration's ledger row with the file in the binary.
type ChecksumState string

const (
	ChecksumOK ChecksumState = "ok"
	// ChecksumChanged: the ledger holds another sha256 and another normal form: a statement of
	// the file was edited after it ran.
	ChecksumChanged ChecksumState = "changed_statements"
	// ChecksumCosmetic: another sha256, the same normal form: only comments or whitespace were
	// edited (`qlmigrate accept` records that).
	ChecksumCosmetic ChecksumState = "changed_cosmetic"
	// ChecksumReleased: the ledger holds the sha256 of an earlier released text of the migration
	// (checksums.ReleasedTexts): not an edit, not drift.
	ChecksumReleased ChecksumState = "released_text"
	ChecksumMissing  ChecksumState = "missing" // applied, but no ledger row
	ChecksumPending  ChecksumState = "-"
)

// Text is the state as status prints it.
func (s ChecksumState) Text() string {
	switch s {
	case ChecksumChanged:
		return "changed (statements)"
	case ChecksumCosmetic:
		return "changed (comments/whitespace only)"
	case ChecksumReleased:
		return "ok (an earlier released text)"
	}
	return string(s)
}

// Status is one line of `qlmigrate status`.
type Status struct {
	Migration checksums.Migration
	Applied   bool
	AppliedAt time.Time
	AppliedBy string        // the session user that applied it ("" without a ledger row)
	Duration  time.Duration // how long its statements took, as the server measured
	Checksum  ChecksumState
}

// StatusReport is `qlmigrate status`: every migration the binary knows, and what up would
// decide before applying anything, read in one snapshot.
type StatusReport struct {
	Migrations []Status
	// Validation is up's own check (Validate: integrity file, ledger, unknown applied
	// versions): up refuses to apply anything unless it is OK. It also catches what no line of
	// Migrations shows: a version applied that the binary does not know, a renamed migration.
	Validation *verify.Report
}

// Pending counts the migrations not applied.
func (s *StatusReport) Pending() int {
	n := 0
	for _, m := range s.Migrations {
		if !m.Applied {
			n++
		}
	}
	return n
}

// Changed counts the applied migrations whose checksum is not ok (changed or missing); an
// earlier released text is ok.
func (s *StatusReport) Changed() int {
	n := 0
	for _, m := range s.Migrations {
		if m.Applied && m.Checksum != ChecksumOK && m.Checksum != ChecksumReleased {
			n++
		}
	}
	return n
}

// Drift is the validation's drift findings: why up would refuse.
func (s *StatusReport) Drift() []verify.Finding {
	var out []verify.Finding
	for _, c := range s.Validation.Checks {
		for _, f := range c.Findings {
			if f.Severity == verify.SeverityDrift {
				out = append(out, f)
			}
		}
	}
	return out
}

// Current reports whether up has nothing to do and nothing to refuse: no migration pending,
// none changed or missing, and the validation OK (status --exit-code).
func (s *StatusReport) Current() bool {
	return s.Pending() == 0 && s.Changed() == 0 && s.Validation.OK
}

// Status lists every migration the binary knows with its applied time and checksum state, and
// runs up's validation (Validate) in the same read-only transaction, without any lock.
func (r *Runner) Status(ctx context.Context) (*StatusReport, error) {
	tx, err := r.begin(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	var role string
	if err := tx.QueryRow(ctx, "SELECT current_user").Scan(&role); err != nil {
		return nil, fmt.Errorf("read the connected role: %w", err)
	}
	validation, err := r.validate(ctx, savepoint{tx})
	var denied *verify.PermissionError
	if errors.As(err, &denied) {
		return nil, fmt.Errorf("%s may not read the applied migrations: %w", role, err)
	}
	if err != nil {
		return nil, err
	}
	st, err := checksums.ReadApplied(ctx, tx)
	if err != nil {
		return nil, err
	}
	ledger := map[int64]db.ControlCoreMigrationLedger{}
	var ledgerExists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass('control_core.migration_ledger') IS NOT NULL").Scan(&ledgerExists); err != nil {
		return nil, fmt.Errorf("look for the checksum ledger: %w", err)
	}
	if ledgerExists {
		rows, err := db.New(tx).ListLedger(ctx)
		if err != nil {
			return nil, fmt.Errorf("read checksum ledger: %w", err)
		}
		for _, row := range rows {
			ledger[row.Version] = row
		}
	}
	out := make([]Status, 0, len(r.Migrations))
	for _, m := range r.Migrations {
		s := Status{Migration: m, Checksum: ChecksumPending}
		if st.IsApplied(m.Version) {
			s.Applied, s.AppliedAt = true, st.At[m.Version]
			row, ok := ledger[m.Version]
			switch {
			case !ok:
				s.Checksum = ChecksumMissing
			case row.Sha256 == m.SHA256:
				s.Checksum = ChecksumOK
			case row.Name == m.Name && isReleased(m.Version, row.Sha256):
				s.Checksum = ChecksumReleased
			case row.NormalizedSha256 == m.Normal:
				s.Checksum = ChecksumCosmetic
			default:
				s.Checksum = ChecksumChanged
			}
			if ok {
				s.AppliedAt = time.UnixMilli(row.AppliedAtMs)
				s.AppliedBy, s.Duration = row.AppliedBy, time.Duration(row.DurationMs)*time.Millisecond
			}
		}
		out = append(out, s)
	}
	return &StatusReport{Migrations: out, Validation: validation}, nil
}

// savepoint hands verify.Run a subtransaction of tx: its reads see tx's snapshot, and what it
// sets (SET LOCAL search_path) ends with it.
type savepoint struct{ tx pgx.Tx }

func (s savepoint) BeginTx(ctx context.Context, _ pgx.TxOptions) (pgx.Tx, error) {
	return s.tx.Begin(ctx)
}

func isReleased(version int64, sha256 string) bool {
	_, ok := checksums.ReleasedTextOf(version, sha256)
	return ok
}
