package main

import (
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/app/cli"
)

// triggerRunNowCmd is `qlsched trigger run-now`: one Run of the head revision, now.
func (a *app) triggerRunNowCmd() *cobra.Command {
	var project, trigger, reason, requestFlag string
	var request uuid.UUID
	cmd := a.publish(&cobra.Command{
		Use:   "run-now --project ID --trigger ID [--reason TEXT] [--request UUID]",
		Short: "Queue one Run of a trigger's head revision now (admin role)",
		Long: `trigger run-now queues one Run of the trigger's head revision now, through
control_core.run_now in one admin transaction, checked as an admission is: the project active,
the head revision enabled, the project's, trigger's, task's and execution's stored digests each
recomputed and equal, the execution a remote worker's. A paused project, a disabled or archived
trigger, or a digest that does not recompute is refused (exit 1) and nothing is written.

The Run is a manual one (owner operator, no occurrence), keyed
ql3:now:v1:<trigger>:<revision>:<request id>, a key no cron occurrence can have; it is queued
with its claimed Attempt, and a dispatcher places it like any queued Run. The trigger's cursor and
claim fence are not touched: its next occurrence fires as it would have. The database writes a
trigger.run_now audit row (run id, revision, request, reason) and the Run's run.created event
names the trigger.

--request makes a retry safe: each call without it is a new request (a new Run); the same
--request again returns the Run it made (already, nothing written), even when the trigger's head
has moved since. A request id that made a Run of another trigger is refused (exit 1). The JSON
document's request_id is the id to retry with.`,
		Example: `  qlsched trigger run-now --project billing --trigger nightly --reason "rerun after the fix"
  qlsched trigger run-now --project billing --trigger nightly --request 5f0c6b3e-8a51-4d0e-9c62-2f4b1f8f2a10`,
	}, func(*cobra.Command) error {
		if err := admin.ValidateID(admin.FieldProject, project); err != nil {
			return err
		}
		if err := admin.ValidateID(admin.FieldTrigger, trigger); err != nil {
			return err
		}
		if err := admin.ValidateCancelReason(reason); err != nil {
			return err
		}
		if requestFlag != "" {
			u, err := uuid.Parse(requestFlag)
			if err != nil || u == uuid.Nil {
				return &cli.UsageError{Err: fmt.Errorf("--request %q: not a non-nil UUID", requestFlag)}
			}
			request = u
		}
		return nil
	}, func(cmd *cobra.Command, p *admin.Publisher) (any, func(io.Writer), error) {
		res, err := p.RunNow(cmd.Context(), project, trigger, request, reason)
		return document{"qlsched.trigger-run-now/v1", res}, func(out io.Writer) {
			fmt.Fprintf(out, "run %s queued for trigger %s/%s revision %d\n  key %s\n",
				res.RunID, res.ProjectID, res.TriggerID, res.TriggerRevision, res.IdempotencyKey)
		}, err
	})
	cmd.Flags().StringVar(&project, "project", "", "project id")
	cmd.Flags().StringVar(&trigger, "trigger", "", "trigger id")
	cmd.Flags().StringVar(&reason, "reason", "", fmt.Sprintf("why (at most %d characters; in the audit row and the run.created event)", admin.MaxCancelReason))
	cmd.Flags().StringVar(&requestFlag, "request", "", "request id (UUID) of a retry: the same one again returns its Run (default: a new one)")
	return cmd
}

// triggerArchiveCmd is `qlsched trigger archive`.
func (a *app) triggerArchiveCmd() *cobra.Command {
	var project, trigger string
	cmd := a.publish(&cobra.Command{
		Use:   "archive --project ID --trigger ID",
		Short: "Archive a trigger: gone from lists, never claimed again, history kept (admin role)",
		Long: `trigger archive retires a trigger for good, through control_core.archive_trigger in one admin
transaction: its schedule row is deleted, so it leaves trigger list, status and the console and
no replica claims it again (a claim in flight admits nothing: its row is gone). Its revisions,
its Runs and the audit log are kept (runs list --trigger still shows its Runs). The database
writes a trigger.archive audit row.

An archived trigger id is never published again: trigger publish, enable, disable, task rollout
and apply refuse it (exit 1); publish under a new id. Idempotent: archiving an archived trigger
says "already archived" and exits 0. An unknown trigger exits 1.`,
		Example: `  qlsched trigger archive --project billing --trigger nightly`,
	}, func(*cobra.Command) error {
		if err := admin.ValidateID(admin.FieldProject, project); err != nil {
			return err
		}
		return admin.ValidateID(admin.FieldTrigger, trigger)
	}, func(cmd *cobra.Command, p *admin.Publisher) (any, func(io.Writer), error) {
		res, err := p.ArchiveTrigger(cmd.Context(), project, trigger)
		return document{"qlsched.trigger-archive/v1", res}, func(out io.Writer) {
			at := time.UnixMilli(res.ArchivedAtMs).UTC().Format(time.RFC3339)
			if res.Already {
				fmt.Fprintf(out, "trigger %s/%s already archived (at revision %d, %s): nothing changed\n", res.ProjectID, res.TriggerID, res.Revision, at)
				return
			}
			fmt.Fprintf(out, "trigger %s/%s archived at revision %d (%s): never claimed again; revisions and Runs kept\n",
				res.ProjectID, res.TriggerID, res.Revision, at)
		}, err
	})
	cmd.Flags().StringVar(&project, "project", "", "project id")
	cmd.Flags().StringVar(&trigger, "trigger", "", "trigger id")
	return cmd
}

// runsPruneCmd is `qlsched runs prune`.
func (a *app) runsPruneCmd() *cobra.Command {
	r := admin.PruneRequest{}
	cmd := a.publish(&cobra.Command{
		Use:   "prune --project ID --older-than DURATION [--batch N] [--dry-run]",
		Short: "Delete a project's old finished Runs and their rows, in batches (admin role)",
		Long: `runs prune deletes the project's Runs that finished (succeeded, failed, cancelled) more than
--older-than ago by database time, with their Attempts, events, leases and offers, through
control_core.prune_runs: batch after batch of at most --batch Runs, each its own transaction with
its run.prune audit row (counts, cutoff), progress on stderr, until a batch comes back short. A
live Run is never taken, nor a cancelled one whose worker has not reported yet (its Attempt or
lease still live). An interrupted prune keeps the batches it committed; run it again.

--older-than is a Go duration, at least ` + admin.MinPruneAge.String() + ` (e.g. 720h for 30 days); less is refused
(exit 2) before anything is opened. --dry-run counts the first batch and deletes nothing.`,
		Example: `  qlsched runs prune --project billing --older-than 720h --batch 1000
  qlsched runs prune --project billing --older-than 720h --dry-run`,
	}, func(*cobra.Command) error {
		return r.Validate()
	}, func(cmd *cobra.Command, p *admin.Publisher) (any, func(io.Writer), error) {
		stderr := cmd.ErrOrStderr()
		res, err := p.PruneRuns(cmd.Context(), r, func(s admin.Pruned) {
			if !s.DryRun {
				fmt.Fprintf(stderr, "runs prune %s: batch %d: %d runs, %d attempts, %d events, %d leases, %d offers deleted so far\n",
					s.ProjectID, s.Batches, s.Runs, s.Attempts, s.Events, s.Leases, s.Offers)
			}
		})
		return document{"qlsched.runs-prune/v1", res}, func(out io.Writer) {
			cutoff := time.UnixMilli(res.CutoffMs).UTC().Format(time.RFC3339)
			if res.DryRun {
				fmt.Fprintf(out, "dry run: the first batch would delete %d runs finished before %s (%d attempts, %d events, %d leases, %d offers)\n",
					res.Runs, cutoff, res.Attempts, res.Events, res.Leases, res.Offers)
				return
			}
			fmt.Fprintf(out, "pruned %d runs finished before %s in %d batches (%d attempts, %d events, %d leases, %d offers)\n",
				res.Runs, cutoff, res.Batches, res.Attempts, res.Events, res.Leases, res.Offers)
		}, err
	})
	fl := cmd.Flags()
	fl.StringVar(&r.Project, "project", "", "project id")
	fl.DurationVar(&r.OlderThan, "older-than", 0, "prune Runs finished more than this long ago (at least "+admin.MinPruneAge.String()+", e.g. 720h)")
	fl.IntVar(&r.Batch, "batch", admin.DefaultPruneBatch, fmt.Sprintf("Runs per batch and transaction (1 … %d)", admin.MaxPruneBatch))
	fl.BoolVar(&r.DryRun, "dry-run", false, "count the first batch, delete nothing")
	return cmd
}
