package main

import (
	"fmt"
	"io"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/app/cli"
)

// runsWithCancel is `qlsched runs` with its cancel command.
func (a *app) runsWithCancel() *cobra.Command {
	cmd := a.runsCmd()
	cmd.AddCommand(a.runsCancelCmd(), a.runsPruneCmd())
	return cmd
}

func (a *app) runsCancelCmd() *cobra.Command {
	var (
		runID  uuid.UUID
		reason string
	)
	cmd := a.publish(&cobra.Command{
		Use:   "cancel RUN_ID [--reason TEXT]",
		Short: "Cancel a Run (admin role; idempotent)",
		Long: `runs cancel cancels a live Run through control_core.cancel_run, in one admin transaction: a
queued Run's Attempt is cancelled; a dispatching Run's offer is withdrawn and its Attempt
cancelled; a running Run is marked cancelled at once and its worker is told at its next heartbeat
to stop the process (the Attempt ends when it reports, or when its lease expires). The database
writes the run.cancelled event (from, by, reason) and a run.cancel audit row.

Idempotent: a Run already succeeded, failed or cancelled is left as it is; the command says
"already <state>" and exits 0. An unknown RUN_ID exits 1; a RUN_ID that is not a UUID exits 2.`,
		Example: `  qlsched runs cancel 0b9f5f4e-8c1a-4c3e-9d52-3a8f0c6e2b11 --reason "bad input file"`,
	}, func(*cobra.Command) error {
		return admin.ValidateCancelReason(reason)
	}, func(cmd *cobra.Command, p *admin.Publisher) (any, func(io.Writer), error) {
		res, err := p.CancelRun(cmd.Context(), runID, reason)
		return document{"qlsched.runs-cancel/v1", res}, func(out io.Writer) {
			if res.Already {
				fmt.Fprintf(out, "run %s already %s: nothing changed\n", res.RunID, res.State)
				return
			}
			fmt.Fprintf(out, "run %s cancelled (was %s)\n", res.RunID, res.From)
			if res.From == "running" {
				fmt.Fprintln(out, "  its worker is told to stop at its next heartbeat")
			}
		}, err
	})
	cmd.Args = func(_ *cobra.Command, args []string) error {
		if len(args) != 1 {
			return cli.Usagef("runs cancel takes one RUN_ID (a UUID), got %d arguments", len(args))
		}
		id, err := uuid.Parse(args[0])
		if err != nil {
			return cli.Usagef("RUN_ID %q: not a UUID", args[0])
		}
		runID = id
		return nil
	}
	cmd.Flags().StringVar(&reason, "reason", "", fmt.Sprintf("why (at most %d characters; in the event and the audit row)", admin.MaxCancelReason))
	return cmd
}
