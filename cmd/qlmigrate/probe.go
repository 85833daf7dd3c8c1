package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/internal/app/cli"
	"github.com/qlcontrol/controlcore/internal/app/verify"
)

func (a *app) probeCmd() *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "probe [--timeout D]",
		Short: "Lock-free, read-only readiness probe: integrity file and capability only",
		Long: `probe checks, in one read-only transaction and without any lock, that this binary's migrations
match its integrity file and that control-core is at the capability the last migration sets
(v28 / pooled_plan_settings): what an init container or a startup probe needs to know before a
replica starts. It reads only control_core.capabilities, which the runtime and admin roles may
read, so it runs with the runtime role's credentials. Everything else is verify's.

Exit codes: 0 ready, 1 not ready (the findings are printed), 2 bad usage, 3 cannot connect or
the database failed (also when --timeout passes). --format json prints verify's report
(docs/verify-json.md, schema qlmigrate.verify/v1), with the other checks skipped.`,
		Example: `  qlmigrate probe --database-url postgres://ql_runtime@db.internal/control --timeout 5s`,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if timeout < 100*time.Millisecond || timeout > 10*time.Minute {
				return cli.Usagef("--timeout %s: want 100ms … 10m", timeout)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			pool, err := a.conn.Open(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			report, err := verify.Run(ctx, pool, verify.Options{Names: a.names, Scope: verify.ScopeProbe})
			if err != nil {
				return err
			}
			report.Target = a.conn.Describe()
			out := cmd.OutOrStdout()
			if a.json() {
				err = writeJSON(out, report)
			} else if report.OK {
				_, err = fmt.Fprintf(out, "ready: %s is at %s v%d / %s; integrity ok (%.1f ms)\n", report.Target, report.Expected.Component, report.Expected.Capability, report.Expected.Name, report.ElapsedMs)
			} else {
				err = verify.WriteText(out, report)
			}
			if err != nil {
				return err
			}
			if !report.OK {
				return cli.Problemf("not ready: %d finding(s)", report.Summary.Drift)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "give up (exit 3) after this long (100ms … 10m)")
	return cmd
}
