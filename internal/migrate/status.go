package migrate

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/checksums"
	"github.com/qlcontrol/controlcore/db"
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

// Status lists every migration the binary knows with its applied time and checksum state, read
// in one read-only transaction without any lock.
func (r *Runner) Status(ctx context.Context) ([]Status, error) {
	tx, err := r.begin(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
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
	return out, nil
}
