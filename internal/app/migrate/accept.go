package migrate

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/checksums"
	"github.com/qlcontrol/controlcore/db"
)

// Acceptance is one audited acceptance of a cosmetic edit (control_core.migration_acceptances).
type Acceptance struct {
	Migration  checksums.Migration
	OldSHA256  string
	NewSHA256  string
	Normal     string
	Reason     string
	AcceptedBy string
	AcceptedAt time.Time
	// Unchanged: the ledger already held the file's sha256; nothing was written.
	Unchanged bool
}

// AcceptError means an acceptance was refused; nothing was written.
type AcceptError struct {
	Migration string
	Reason    string
}

func (e *AcceptError) Error() string { return e.Migration + ": cannot accept: " + e.Reason }

// Accept records that the applied migration version now has the sha256 of the file in this
// binary, when the edit changed comments or whitespace only (the same normal form): the ledger
// row moves to the new sha256 and an audit row keeps the old one with who, when and why, in one
// transaction. A statement edit, a released text (checksums.ReleasedTexts: nothing to
// accept), a migration that is not applied or a binary whose integrity file does not match its
// migrations is an *AcceptError; a version the stream does not have a *FieldError (field
// Version).
func (r *Runner) Accept(ctx context.Context, version int64, reason string) (*Acceptance, error) {
	m, ok := r.byVersion[version]
	if !ok {
		if version < 1 {
			return nil, &FieldError{Field: "Version", Value: version, Want: "want a migration version, 1 or more"}
		}
		return nil, versionIn(r.Migrations, "Version", version)
	}
	problems, err := checksums.CheckSum(r.fsys)
	if err != nil {
		return nil, err
	}
	if len(problems) > 0 {
		return nil, &AcceptError{Migration: m.Name, Reason: fmt.Sprintf("this binary's migrations do not match %s (%s): rebuild it from a commit where `qlmigrate hash --check` passes",
			checksums.SumFileName, problems[0].String())}
	}
	var out *Acceptance
	err = r.db.InTx(ctx, txOptions, func(tx pgx.Tx) error {
		before, _, _ := r.txPrologue()
		if err := r.execAll(ctx, tx, before); err != nil {
			return err
		}
		q := db.New(tx)
		rows, err := q.ListLedger(ctx)
		if err != nil {
			return fmt.Errorf("read checksum ledger: %w", err)
		}
		var row *db.ControlCoreMigrationLedger
		for i := range rows {
			if rows[i].Version == version {
				row = &rows[i]
			}
		}
		switch {
		case row == nil:
			return &AcceptError{Migration: m.Name, Reason: "it is not applied (no ledger row): there is nothing to accept"}
		case row.Sha256 == m.SHA256:
			out = &Acceptance{Migration: m, OldSHA256: row.Sha256, NewSHA256: m.SHA256, Normal: m.Normal, Unchanged: true}
			return nil
		case row.Name == m.Name && isReleased(m.Version, row.Sha256):
			rel, _ := checksums.ReleasedTextOf(m.Version, row.Sha256)
			return &AcceptError{Migration: m.Name, Reason: fmt.Sprintf("it ran as an earlier released text, shipped by %s (ledger sha256 %s): "+
				"not drift and not an edit, so there is nothing to accept (verify and status report it as released_text; checksums.ReleasedTexts documents it)",
				rel.Release, row.Sha256[:12])}
		case row.NormalizedSha256 != m.Normal:
			return &AcceptError{Migration: m.Name, Reason: fmt.Sprintf("changed (statements): the file's normal form %s differs from the one that ran, %s; "+
				"only a comment or whitespace edit can be accepted: restore %s as it was applied and put the change in a new migration",
				m.Normal[:12], row.NormalizedSha256[:12], m.File)}
		}
		if _, err := q.AcceptLedgerChecksum(ctx, db.AcceptLedgerChecksumParams{NewSha256: m.SHA256, Version: version, OldSha256: row.Sha256, NormalizedSha256: m.Normal}); err != nil {
			return fmt.Errorf("update the ledger row of %s: %w", m.Name, err)
		}
		a, err := q.InsertAcceptance(ctx, db.InsertAcceptanceParams{Version: version, OldSha256: row.Sha256, NewSha256: m.SHA256, NormalizedSha256: m.Normal, Reason: reason})
		if err != nil {
			return fmt.Errorf("record the acceptance of %s: %w", m.Name, err)
		}
		out = &Acceptance{Migration: m, OldSHA256: a.OldSha256, NewSHA256: a.NewSha256, Normal: a.NormalizedSha256, Reason: a.Reason,
			AcceptedBy: a.AcceptedBy, AcceptedAt: time.UnixMilli(a.AcceptedAtMs)}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
