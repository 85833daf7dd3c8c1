package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/checksums"
	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/cli"
	"github.com/qlcontrol/controlcore/sql/migrations"
)

func (a *app) upCmd() *cobra.Command {
	var to int64
	cmd := &cobra.Command{
		Use:   "up [--to VERSION]",
		Short: "Apply pending migrations under a lock, as the owner role; idempotent",
		Long: `up applies the pending migrations of the embedded stream, each in its own transaction with
its version row and checksum-ledger row, under goose's session advisory lock (a concurrent up
waits, then finds nothing to do). Every session runs SET ROLE <prefix>owner first, so the owner
role owns every object even when you connect as a superuser. A failing migration leaves no part
of itself behind; the ones before it stay applied. (A migration marked "-- +goose NO
TRANSACTION", of which the stream has none, runs statement by statement: its version and
ledger rows still commit together, but a failure may leave some of its statements applied.)`,
		Example: `  qlmigrate up --database-url postgres://ql_owner@db.internal/control
  qlmigrate up --to 14`,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if to < 0 {
				return cli.Usagef("--to %d: want a migration version, 1 or more", to)
			}
			// The stream is embedded, so a version it does not have is bad usage, caught before
			// anything is opened.
			list, err := checksums.Load(migrations.FS)
			if err != nil {
				return fmt.Errorf("read the embedded migrations: %w", err)
			}
			if last := list[len(list)-1].Version; to > last {
				return cli.Usagef("--to %d: the stream has versions 1 … %d", to, last)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			r, err := a.openRunner(ctx, true)
			if err != nil {
				return err
			}
			defer r.Close()
			applied, upErr := r.Up(ctx, to)
			capability, capErr := db.New(r.Pool).Capability(ctx, "control-core")
			out := cmd.OutOrStdout()
			if a.json() {
				type item struct {
					Version    int64   `json:"version"`
					Name       string  `json:"name"`
					DurationMs float64 `json:"duration_ms"`
				}
				res := struct {
					Applied    []item `json:"applied"`
					Capability *int32 `json:"capability,omitempty"`
					Error      string `json:"error,omitempty"`
				}{Applied: []item{}}
				for _, m := range applied {
					res.Applied = append(res.Applied, item{m.Migration.Version, m.Migration.Name, float64(m.Duration.Microseconds()) / 1000})
				}
				if capErr == nil {
					res.Capability = &capability.Version
				}
				if upErr != nil {
					res.Error = a.redact(upErr.Error())
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
	return cmd
}
