package migrate

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/checksums"
	"github.com/qlcontrol/controlcore/internal/base/sqlfile"
)

// PlanTx is one transaction up would run.
type PlanTx struct {
	Migration     *checksums.Migration // nil for the transaction that creates goose's version table
	NoTransaction bool                 // its statements run in autocommit, then the record in a transaction
	Statements    []string             // in order, each ending in ";", BEGIN and COMMIT excluded
}

// Plan is what up would run now, in order.
type Plan struct {
	Target  string
	Pending []checksums.Migration
	Txs     []PlanTx
}

// DryRun validates as up does and returns the plan up would run, reading in read-only
// transactions without taking any lock: it writes nothing and waits for no one. A validation
// drift is a *DriftError, as for up.
func (r *Runner) DryRun(ctx context.Context, to int64) (*Plan, error) {
	if err := r.checkTo(to); err != nil {
		return nil, err
	}
	report, err := r.Validate(ctx)
	if err != nil {
		return nil, err
	}
	if !report.OK {
		return nil, &DriftError{Report: report}
	}
	tx, err := r.begin(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	st, err := checksums.ReadApplied(ctx, tx)
	if err != nil {
		return nil, err
	}
	p := &Plan{Target: r.conn.Describe()}
	before, lockSQL, after := r.txPrologue()
	prologue := append(append(append(r.db.Prologue(), before...), lockSQL), after...)
	if !st.TableExists {
		p.Txs = append(p.Txs, PlanTx{Statements: append(append([]string{}, prologue...), checksums.VersionTableSQL()...)})
	}
	for _, m := range r.Migrations {
		if to != 0 && m.Version > to {
			break
		}
		if st.IsApplied(m.Version) {
			continue
		}
		m := m
		p.Pending = append(p.Pending, m)
		stmts := make([]string, 0, len(prologue)+len(r.files[m.Version].Up)+3)
		for _, s := range r.statements(m.Version) {
			stmts = append(stmts, terminated(s))
		}
		record := checksums.RecordSQL(m)
		if r.files[m.Version].NoTransaction {
			start := []string{"SET lock_timeout = " + fmt.Sprint(r.opts.LockTimeout.Milliseconds()) + ";",
				fmt.Sprintf("SELECT pg_advisory_lock(%d);", LockKey), "RESET lock_timeout;",
				"SELECT set_config('qlmigrate.started_at', clock_timestamp()::text, false);"}
			p.Txs = append(p.Txs, PlanTx{Migration: &m, NoTransaction: true,
				Statements: append(append(append(start, stmts...), BeginSQL), append(record, "COMMIT;", fmt.Sprintf("SELECT pg_advisory_unlock(%d);", LockKey))...)})
			continue
		}
		all := append(append(append([]string{}, prologue...), checksums.StartSQL), stmts...)
		p.Txs = append(p.Txs, PlanTx{Migration: &m, Statements: append(all, record...)})
	}
	return p, nil
}

func terminated(s string) string {
	if strings.HasSuffix(strings.TrimSpace(s), ";") {
		return s
	}
	return s + ";"
}

// WriteSQL prints the plan as one script for psql: every transaction between BEGIN and COMMIT,
// the role switch, the lock, each migration's statements exactly as up sends them, and the
// version and ledger rows. Run it with psql -v ON_ERROR_STOP=1 -f, connected as up would be.
func (p *Plan) WriteSQL(w io.Writer, now time.Time) error {
	var b strings.Builder
	// Every comment line stays one line (sqlfile.CommentText): a control character, a newline in
	// a database name say, would end it and put the rest, a psql meta-command perhaps, into the
	// script a DBA runs.
	c := sqlfile.CommentText
	fmt.Fprintf(&b, "-- qlmigrate up --dry-run: %d pending migration(s) on %s, planned %s\n", len(p.Pending), c(p.Target), now.UTC().Format(time.RFC3339))
	b.WriteString("-- The exact SQL up would run, in order. up itself also re-reads the applied versions after\n" +
		"-- taking the lock in each transaction and skips a migration another run applied meanwhile;\n" +
		"-- this script does not. Review, then: psql -v ON_ERROR_STOP=1 -f this.sql \"$URL\"\n")
	if len(p.Txs) == 0 {
		b.WriteString("-- nothing to apply\n")
	}
	b.WriteString("\\set ON_ERROR_STOP on\n")
	for _, tx := range p.Txs {
		b.WriteString("\n")
		if tx.Migration == nil {
			b.WriteString("-- goose's version table, created once before pg-0001\n")
		} else {
			fmt.Fprintf(&b, "-- %s (%s), sha256 %s, normal form %s\n", c(tx.Migration.Name), c(tx.Migration.File), c(tx.Migration.SHA256), c(tx.Migration.Normal))
		}
		if tx.NoTransaction {
			b.WriteString("-- NO TRANSACTION: its statements autocommit one by one under the session lock\n")
			for _, s := range tx.Statements {
				b.WriteString(s + "\n")
			}
			continue
		}
		b.WriteString(BeginSQL + "\n")
		for _, s := range tx.Statements {
			b.WriteString(s + "\n")
		}
		b.WriteString("COMMIT;\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
