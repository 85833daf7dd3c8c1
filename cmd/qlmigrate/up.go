package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/internal/app/cli"
	"github.com/qlcontrol/controlcore/internal/app/migrate"
	"github.com/qlcontrol/controlcore/internal/app/verify"
)

func (a *app) upCmd() *cobra.Command {
	var (
		to          int64
		dryRun      bool
		lockTimeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "up [--to VERSION] [--dry-run] [--lock-timeout D]",
		Short: "Validate, then apply pending migrations under the migration lock, as the owner role; idempotent",
		Long: `up first validates, read-only and before taking any lock: the integrity file, the ledger
checksums of the applied migrations and unknown applied versions (verify's integrity, ledger and
unknown_versions checks). Any drift is printed as verify prints it and exits 1 with nothing
applied; an edit of comments or whitespace only is drift too until "qlmigrate accept" records it.

Then it applies each pending migration in a transaction of its own, which runs SET LOCAL ROLE
<prefix>owner (so the owner role owns every object even when you connect as a superuser), takes
the migration lock (goose's advisory lock key, as a transaction lock), re-reads the applied
versions, runs the migration's statements and writes its version row and checksum-ledger row
(raw and normal-form sha256, who, when, how long). A concurrent up waits, then finds nothing to
do. A failing migration leaves no part of itself behind; the ones before it stay applied. (A
migration marked "-- +goose NO TRANSACTION", of which the stream has none, runs statement by
statement under the session lock; behind a transaction pooler it is refused.)

--lock-timeout bounds the wait for the lock: while waiting, a line on stderr every 5 s names the
session that holds it (pid, application_name, user, client address, since when, state); at the
timeout up exits 1 naming it. up's own sessions are named "qlmigrate up (<host> pid <pid>)".

--dry-run prints, instead, the exact SQL up would run now, in order, with the role switch, the
lock, the version and ledger rows and the transaction boundaries, for a DBA to review and run
with psql -f. It reads in read-only transactions, takes no lock and writes nothing.

Through a transaction-pooling PgBouncer: add ql_pooler=transaction to the connection URL (or let
qlmigrate detect PgBouncer): every setting is then made per transaction (SET LOCAL) and the lock
is still a real one.`,
		Example: `  qlmigrate up --database-url postgres://ql_owner@db.internal/control
  qlmigrate up --to 14
  qlmigrate up --dry-run > plan.sql && psql -v ON_ERROR_STOP=1 -f plan.sql "$OWNER_URL"
  qlmigrate up --lock-timeout 30s --database-url 'postgres://ql_owner@pgbouncer:6432/control?ql_pooler=transaction'`,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			// The stream is embedded, so a version it does not have is bad usage, caught before
			// anything is opened.
			if err := (migrate.Options{LockTimeout: lockTimeout}).Validate(); err != nil {
				return err
			}
			return migrate.CheckTarget(nil, to)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			stderr := cmd.ErrOrStderr()
			r, err := migrate.Open(ctx, a.conn, migrate.Options{Names: a.names, AsOwner: true, LockTimeout: lockTimeout,
				Waiting: func(waited time.Duration, holders []migrate.LockHolder) {
					for _, h := range holders {
						fmt.Fprintf(stderr, "qlmigrate up: waiting %s for the migration lock (timeout %s), held by %s\n", waited.Round(time.Second), lockTimeout, h)
					}
				}})
			if err != nil {
				return err
			}
			defer r.Close()
			out := cmd.OutOrStdout()
			if dryRun {
				plan, err := r.DryRun(ctx, to)
				if err != nil {
					return a.upDrift(out, err)
				}
				if a.json() {
					return writeJSON(out, planJSON(plan))
				}
				return plan.WriteSQL(out, time.Now())
			}
			applied, upErr := r.Up(ctx, to)
			if upErr != nil {
				var drift *migrate.DriftError
				if errors.As(upErr, &drift) {
					return a.upDrift(out, upErr)
				}
			}
			var lockErr *migrate.LockTimeoutError
			if errors.As(upErr, &lockErr) {
				upErr = &cli.ProblemError{Err: upErr}
			}
			capability, capErr := r.Capability(ctx)
			if a.json() {
				type item struct {
					Version    int64   `json:"version"`
					Name       string  `json:"name"`
					DurationMs float64 `json:"duration_ms"`
				}
				res := struct {
					Schema     string               `json:"schema"`
					Applied    []item               `json:"applied"`
					Capability *int32               `json:"capability,omitempty"`
					Error      string               `json:"error,omitempty"`
					LockHeldBy []migrate.LockHolder `json:"lock_held_by,omitempty"`
				}{Schema: schemaUp, Applied: []item{}}
				for _, m := range applied {
					res.Applied = append(res.Applied, item{m.Migration.Version, m.Migration.Name, float64(m.Duration.Microseconds()) / 1000})
				}
				if capErr == nil {
					res.Capability = &capability.Version
				}
				if upErr != nil {
					res.Error = a.redact(upErr.Error())
				}
				if lockErr != nil {
					res.LockHeldBy = lockErr.Holders
				}
				if err := writeJSON(out, res); err != nil {
					return err
				}
				return upErr
			}
			for _, m := range applied {
				fmt.Fprintf(out, "applied %-40s %8.1f ms\n", m.Migration.Name, float64(m.Duration.Microseconds())/1000)
			}
			if upErr != nil {
				return upErr
			}
			if len(applied) == 0 {
				fmt.Fprint(out, "nothing to apply; ")
			} else {
				fmt.Fprintf(out, "%d applied; ", len(applied))
			}
			if capErr != nil {
				return fmt.Errorf("read capability: %w", capErr)
			}
			fmt.Fprintf(out, "control-core is at v%d (%s, %s)\n", capability.Version, capability.Name, capability.Migration)
			return nil
		},
	}
	cmd.Flags().Int64Var(&to, "to", 0, "apply up to and including this version (default: all)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the exact SQL up would run (psql -f ready) instead; read-only, takes no lock, writes nothing")
	cmd.Flags().DurationVar(&lockTimeout, "lock-timeout", migrate.DefaultLockTimeout, fmt.Sprintf("how long to wait for the migration lock before exiting 1 (%s … %s); the holder is named every 5 s while waiting", migrate.MinLockTimeout, migrate.MaxLockTimeout))
	return cmd
}

// upDrift prints the validation findings of up as verify prints them and exits 1.
func (a *app) upDrift(out io.Writer, err error) error {
	var drift *migrate.DriftError
	if !errors.As(err, &drift) {
		return err
	}
	var werr error
	if a.json() {
		werr = writeJSON(out, drift.Report)
	} else {
		werr = verify.WriteText(out, drift.Report)
	}
	if werr != nil {
		return werr
	}
	return &cli.ProblemError{Err: err}
}

type planTxJSON struct {
	Version       int64    `json:"version,omitempty"`
	Name          string   `json:"name,omitempty"`
	SHA256        string   `json:"sha256,omitempty"`
	NoTransaction bool     `json:"no_transaction"`
	Statements    []string `json:"statements"`
}

func planJSON(p *migrate.Plan) any {
	txs := make([]planTxJSON, 0, len(p.Txs))
	for _, tx := range p.Txs {
		j := planTxJSON{NoTransaction: tx.NoTransaction, Statements: tx.Statements}
		if tx.Migration != nil {
			j.Version, j.Name, j.SHA256 = tx.Migration.Version, tx.Migration.Name, tx.Migration.SHA256
		}
		txs = append(txs, j)
	}
	return struct {
		Schema       string       `json:"schema"`
		Target       string       `json:"target"`
		Pending      int          `json:"pending"`
		Transactions []planTxJSON `json:"transactions"`
	}{schemaPlan, p.Target, len(p.Pending), txs}
}
