package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/cli"
	"github.com/qlcontrol/controlcore/internal/limits"
	"github.com/qlcontrol/controlcore/schedule"
)

// publishErr maps publisher errors onto the exit-code contract.
func publishErr(err error) error {
	var invalid *coordinator.InvalidError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &invalid):
		return &cli.UsageError{Err: err}
	case errors.Is(err, coordinator.ErrNotFound), errors.Is(err, coordinator.ErrExists):
		return &cli.ProblemError{Err: err}
	}
	return err
}

// withPool runs fn on a pool for the resolved connection.
func (a *app) withPool(ctx context.Context, fn func(*pgxpool.Pool) error) error {
	cfg, err := a.connConfig()
	if err != nil {
		return err
	}
	pool, err := cfg.Open(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	return fn(pool)
}

func (a *app) output(w io.Writer, v any, text func()) error {
	if a.format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	text()
	return nil
}

func (a *app) projectCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "project", Short: "Manage projects (admin role)"}
	var project string
	create := &cobra.Command{
		Use:   "create --project ID",
		Short: "Create an active project",
		Long:  "project create creates an active project at revision 1 in one admin transaction, with an audit row.",
		PreRunE: func(*cobra.Command, []string) error {
			if err := coordinator.ValidateID("project", project); err != nil {
				return &cli.UsageError{Err: err}
			}
			_, err := a.connConfig()
			return err
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withPool(cmd.Context(), func(pool *pgxpool.Pool) error {
				if err := publishErr(coordinator.NewPublisher(pool).CreateProject(cmd.Context(), project)); err != nil {
					return err
				}
				return a.output(cmd.OutOrStdout(), map[string]any{"project": project, "revision": 1}, func() {
					fmt.Fprintf(cmd.OutOrStdout(), "project %s created (revision 1, active)\n", project)
				})
			})
		},
	}
	create.Flags().StringVar(&project, "project", "", "project id: "+idRule)
	cmd.AddCommand(create)
	return cmd
}

const idRule = limits.IDRule

func (a *app) taskCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "task", Short: "Publish tasks (admin role)"}
	var project, task, spec string
	publish := &cobra.Command{
		Use:   "publish --project ID --task ID --executor-spec JSON",
		Short: "Publish a new task revision pinned to a remote_worker execution revision",
		Long: `task publish creates the next revision of a task in one admin transaction. The revision pins
a remote_worker execution revision whose digest is the sha256 of the spec's canonical form (its
PostgreSQL jsonb text); identical specs share one execution revision. Admission re-verifies that
digest, so a spec edited behind its digest admits nothing.`,
		Example: `  qlsched task publish --project billing --task invoice --executor-spec '{"image":"billing/invoice:1.4"}'`,
		PreRunE: func(*cobra.Command, []string) error {
			for _, id := range [][2]string{{"project", project}, {"task", task}} {
				if err := coordinator.ValidateID(id[0], id[1]); err != nil {
					return &cli.UsageError{Err: err}
				}
			}
			// every rule jsonb and the size bound hold, before connecting; the message names
			// the position and the rule, never the spec's content
			if err := coordinator.ValidateExecutorSpec([]byte(spec)); err != nil {
				return &cli.UsageError{Err: err}
			}
			_, err := a.connConfig()
			return err
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withPool(cmd.Context(), func(pool *pgxpool.Pool) error {
				pub, err := coordinator.NewPublisher(pool).PublishTask(cmd.Context(), project, task, []byte(spec))
				if err := publishErr(err); err != nil {
					return err
				}
				return a.output(cmd.OutOrStdout(), pub, func() {
					fmt.Fprintf(cmd.OutOrStdout(), "task %s/%s revision %d published; execution revision %s (sha256 %s)\n",
						project, task, pub.Revision, pub.ExecutionRevisionID, pub.ExecutionDigest)
				})
			})
		},
	}
	fl := publish.Flags()
	fl.StringVar(&project, "project", "", "project id")
	fl.StringVar(&task, "task", "", "task id: "+idRule)
	fl.StringVar(&spec, "executor-spec", "", "the remote_worker execution spec: a JSON object of at most 64 KiB that PostgreSQL jsonb stores (no \\u0000, no unpaired surrogate escapes, numbers within numeric's range, at most 1000 levels deep)")
	cmd.AddCommand(publish)
	return cmd
}

func (a *app) triggerCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "trigger", Short: "Publish and list cron triggers"}
	var (
		t        coordinator.TriggerSpec
		misfire  string
		disabled bool
	)
	publish := &cobra.Command{
		Use:   "publish --project ID --trigger ID --task ID --cron SPEC",
		Short: "Publish a new cron trigger revision and reset its schedule row",
		Long: `trigger publish creates the next revision of a cron trigger, pinned to the task's current
revision, and in the same admin transaction upserts its schedule row: the cursor and any claim are
cleared and the state and claim versions incremented, so a replica still holding a claim on the
old revision can never admit with it. The first occurrence is the first one after the next claim.

Cron: five fields (minute hour day-of-month month day-of-week), an optional leading seconds
field, or @yearly @monthly @weekly @daily @hourly. @every is an interval, not cron: rejected.
The spec is stored exactly as given: at most 200 characters of printable ASCII, and leading or
trailing spaces are refused (not trimmed). --timezone: an IANA name of at most 64 characters.
--misfire skip: after an outage, advance to the next occurrence without a Run.
--misfire fire_once: after an outage, admit one Run for the latest missed occurrence, never a
backlog (docs/scheduling.md has the exact rule).`,
		Example: `  qlsched trigger publish --project billing --trigger nightly --task invoice --cron "0 3 * * *" --timezone Europe/Berlin --misfire fire_once`,
		PreRunE: func(*cobra.Command, []string) error {
			t.Misfire, t.Enabled = schedule.MisfirePolicy(misfire), !disabled
			if err := t.Validate(); err != nil {
				return &cli.UsageError{Err: err}
			}
			_, err := a.connConfig()
			return err
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withPool(cmd.Context(), func(pool *pgxpool.Pool) error {
				pub, err := coordinator.NewPublisher(pool).PublishTrigger(cmd.Context(), t)
				if err := publishErr(err); err != nil {
					return err
				}
				return a.output(cmd.OutOrStdout(), pub, func() {
					fmt.Fprintf(cmd.OutOrStdout(), "trigger %s/%s revision %d published (task %s revision %d, %q %s, misfire %s, enabled %v)\n",
						t.Project, t.Trigger, pub.Revision, t.Task, pub.TaskRevision, t.Cron, t.TimeZone, t.Misfire, t.Enabled)
				})
			})
		},
	}
	fl := publish.Flags()
	fl.StringVar(&t.Project, "project", "", "project id")
	fl.StringVar(&t.Trigger, "trigger", "", "trigger id: "+idRule)
	fl.StringVar(&t.Task, "task", "", "task id (must be published)")
	fl.StringVar(&t.Cron, "cron", "", "cron spec, e.g. \"*/5 * * * *\" ("+limits.CronRule+")")
	fl.StringVar(&t.TimeZone, "timezone", "UTC", "IANA time zone, e.g. Europe/Berlin ("+limits.TimeZoneRule+")")
	fl.StringVar(&misfire, "misfire", "skip", "misfire policy: skip or fire_once")
	fl.BoolVar(&disabled, "disabled", false, "publish the revision disabled (never claimed)")

	var project string
	list := &cobra.Command{
		Use:   "list [--project ID]",
		Short: "List triggers with their schedule state",
		PreRunE: func(*cobra.Command, []string) error {
			if project != "" {
				if err := coordinator.ValidateID("project", project); err != nil {
					return &cli.UsageError{Err: err}
				}
			}
			_, err := a.connConfig()
			return err
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withPool(cmd.Context(), func(pool *pgxpool.Pool) error {
				rows, err := db.New(pool).ListTriggers(cmd.Context(), pgtype.Text{String: project, Valid: project != ""})
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				return a.output(out, rows, func() {
					tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "PROJECT\tTRIGGER\tREV\tCRON\tTIMEZONE\tMISFIRE\tENABLED\tNEXT FIRE\tLAST SCHEDULED\tCLAIM")
					for _, r := range rows {
						claim := "-"
						if r.ClaimOwner.Valid {
							claim = fmt.Sprintf("%s v%d (%+.1fs)", r.ClaimOwner.String, r.ClaimVersion, float64(r.ClaimExpiresAtMs.Int64-r.NowMs)/1000)
						}
						fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%v\t%s\t%s\t%s\n", r.ProjectID, r.TriggerID, r.TriggerRevision,
							r.CronSpec, r.Timezone, r.MisfirePolicy, r.Enabled, msTime(r.NextFireAtMs), msTime(r.LastScheduledAtMs), claim)
					}
					tw.Flush()
				})
			})
		},
	}
	list.Flags().StringVar(&project, "project", "", "only this project")
	cmd.AddCommand(publish, list)
	return cmd
}

func (a *app) runsCmd() *cobra.Command {
	var (
		project, trigger string
		limit            int
	)
	cmd := &cobra.Command{Use: "runs", Short: "Inspect admitted runs"}
	list := &cobra.Command{
		Use:   "list [--project ID] [--trigger ID] [--limit N]",
		Short: "List the most recent runs",
		PreRunE: func(*cobra.Command, []string) error {
			for _, id := range [][2]string{{"project", project}, {"trigger", trigger}} {
				if id[1] != "" {
					if err := coordinator.ValidateID(id[0], id[1]); err != nil {
						return &cli.UsageError{Err: err}
					}
				}
			}
			if limit < 1 || limit > 10000 {
				return cli.Usagef("--limit %d: want 1 … 10000", limit)
			}
			_, err := a.connConfig()
			return err
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withPool(cmd.Context(), func(pool *pgxpool.Pool) error {
				rows, err := db.New(pool).ListRuns(cmd.Context(), db.ListRunsParams{
					ProjectID: pgtype.Text{String: project, Valid: project != ""},
					TriggerID: pgtype.Text{String: trigger, Valid: trigger != ""}, MaxRows: int32(limit)})
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				return a.output(out, rows, func() {
					tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "RUN\tPROJECT\tTRIGGER\tSCHEDULED FOR\tLAG\tSTATE\tATTEMPTS\tEVENTS\tIDEMPOTENCY KEY")
					for _, r := range rows {
						lag := "-"
						if r.ScheduledForMs.Valid && r.QueuedAtMs.Valid {
							lag = fmt.Sprintf("%dms", r.QueuedAtMs.Int64-r.ScheduledForMs.Int64)
						}
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", r.RunID, r.ProjectID, r.TriggerID.String,
							msTime(r.ScheduledForMs), lag, r.State, r.Attempts, r.Events, r.IdempotencyKey)
					}
					tw.Flush()
				})
			})
		},
	}
	fl := list.Flags()
	fl.StringVar(&project, "project", "", "only this project")
	fl.StringVar(&trigger, "trigger", "", "only this trigger")
	fl.IntVar(&limit, "limit", 50, "at most this many runs, newest first (1 … 10000)")
	cmd.AddCommand(list)
	return cmd
}

func msTime(v pgtype.Int8) string {
	if !v.Valid {
		return "-"
	}
	return time.UnixMilli(v.Int64).UTC().Format("2006-01-02T15:04:05.000Z")
}
