package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/cli"
	"github.com/qlcontrol/controlcore/internal/limits"
)

// flagOf names the command-line flag that gives an input field of package admin.
func flagOf(field string) (string, bool) {
	switch field {
	case admin.FieldProject, admin.FieldTask, admin.FieldTrigger, admin.FieldCron, admin.FieldTimeZone,
		admin.FieldMisfire, admin.FieldLimit:
		return "--" + field, true
	case admin.FieldExecutorSpec:
		return "--executor-spec", true
	}
	return "", false
}

// adminErr maps errors of package admin onto the exit-code contract: a refused field is bad
// usage (exit 2) and names the flag the user gave it with; a missing or existing object is a
// problem found (exit 1).
func adminErr(err error) error {
	var field *admin.FieldError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &field):
		if flag, ok := flagOf(field.Field); ok {
			return &cli.UsageError{Err: fmt.Errorf("%s: %w", flag, field.Err)}
		}
		return &cli.UsageError{Err: err}
	case errors.Is(err, admin.ErrNotFound), errors.Is(err, admin.ErrExists):
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
			if err := admin.ValidateID(admin.FieldProject, project); err != nil {
				return adminErr(err)
			}
			_, err := a.connConfig()
			return err
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withPool(cmd.Context(), func(pool *pgxpool.Pool) error {
				if err := adminErr(admin.NewPublisher(pool).CreateProject(cmd.Context(), project)); err != nil {
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
	var (
		t    admin.TaskSpec
		spec string
	)
	publish := &cobra.Command{
		Use:   "publish --project ID --task ID --executor-spec JSON",
		Short: "Publish a new task revision pinned to a remote_worker execution revision",
		Long: `task publish creates the next revision of a task in one admin transaction. The revision pins
a remote_worker execution revision whose digest is the sha256 of the spec's canonical form (its
PostgreSQL jsonb text); identical specs share one execution revision. Admission re-verifies that
digest, so a spec edited behind its digest admits nothing.`,
		Example: `  qlsched task publish --project billing --task invoice --executor-spec '{"image":"billing/invoice:1.4"}'`,
		PreRunE: func(*cobra.Command, []string) error {
			// the publisher's own checks, before connecting (every rule jsonb and the size
			// bound hold; the message names the position and the rule, never the spec's content)
			t.ExecutorSpec = []byte(spec)
			if err := t.Validate(); err != nil {
				return adminErr(err)
			}
			_, err := a.connConfig()
			return err
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withPool(cmd.Context(), func(pool *pgxpool.Pool) error {
				pub, err := admin.NewPublisher(pool).PublishTask(cmd.Context(), t)
				if err := adminErr(err); err != nil {
					return err
				}
				return a.output(cmd.OutOrStdout(), pub, func() {
					fmt.Fprintf(cmd.OutOrStdout(), "task %s/%s revision %d published; execution revision %s (sha256 %s)\n",
						t.Project, t.Task, pub.Revision, pub.ExecutionRevisionID, pub.ExecutionDigest)
				})
			})
		},
	}
	fl := publish.Flags()
	fl.StringVar(&t.Project, "project", "", "project id")
	fl.StringVar(&t.Task, "task", "", "task id: "+idRule)
	fl.StringVar(&spec, "executor-spec", "", "the remote_worker execution spec: a JSON object of at most 64 KiB that PostgreSQL jsonb stores (no \\u0000, no unpaired surrogate escapes, numbers within numeric's range, at most 1000 levels deep)")
	cmd.AddCommand(publish)
	return cmd
}

func (a *app) triggerCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "trigger", Short: "Publish and list cron triggers"}
	var (
		t        admin.TriggerSpec
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
field, or one of @yearly @annually @monthly @weekly @daily @midnight @hourly (@annually is
@yearly, @midnight is @daily). @every is an interval, not cron: rejected.
The spec is stored exactly as given: at most 200 characters of printable ASCII, and leading or
trailing spaces are refused (not trimmed). --timezone: an IANA name of at most 64 characters.
--misfire skip: after an outage, advance to the next occurrence without a Run.
--misfire fire_once: after an outage, admit one Run for the latest missed occurrence, never a
backlog (docs/scheduling.md has the exact rule).`,
		Example: `  qlsched trigger publish --project billing --trigger nightly --task invoice --cron "0 3 * * *" --timezone Europe/Berlin --misfire fire_once`,
		PreRunE: func(*cobra.Command, []string) error {
			t.Misfire, t.Enabled = coordinator.MisfirePolicy(misfire), !disabled
			if err := t.Validate(); err != nil {
				return adminErr(err)
			}
			_, err := a.connConfig()
			return err
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withPool(cmd.Context(), func(pool *pgxpool.Pool) error {
				pub, err := admin.NewPublisher(pool).PublishTrigger(cmd.Context(), t)
				if err := adminErr(err); err != nil {
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

	var filter admin.TriggerFilter
	list := &cobra.Command{
		Use:   "list [--project ID]",
		Short: "List triggers with their schedule state",
		PreRunE: func(*cobra.Command, []string) error {
			if err := filter.Validate(); err != nil {
				return adminErr(err)
			}
			_, err := a.connConfig()
			return err
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withPool(cmd.Context(), func(pool *pgxpool.Pool) error {
				rows, err := admin.NewReader(pool).Triggers(cmd.Context(), filter)
				if err := adminErr(err); err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				return a.output(out, rows, func() {
					tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "PROJECT\tTRIGGER\tREV\tCRON\tTIMEZONE\tMISFIRE\tENABLED\tNEXT FIRE\tLAST SCHEDULED\tCLAIM")
					for _, r := range rows {
						claim := "-"
						if r.ClaimOwner != nil && r.ClaimExpiresAtMs != nil {
							claim = fmt.Sprintf("%s v%d (%+.1fs)", *r.ClaimOwner, r.ClaimVersion, float64(*r.ClaimExpiresAtMs-r.NowMs)/1000)
						}
						fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%v\t%s\t%s\t%s\n", r.ProjectID, r.TriggerID, r.TriggerRevision,
							r.CronSpec, r.TimeZone, r.MisfirePolicy, r.Enabled, msTime(r.NextFireAtMs), msTime(r.LastScheduledAtMs), claim)
					}
					tw.Flush()
				})
			})
		},
	}
	list.Flags().StringVar(&filter.Project, "project", "", "only this project")
	cmd.AddCommand(publish, list)
	return cmd
}

func (a *app) runsCmd() *cobra.Command {
	var filter admin.RunFilter
	cmd := &cobra.Command{Use: "runs", Short: "Inspect admitted runs"}
	list := &cobra.Command{
		Use:   "list [--project ID] [--trigger ID] [--limit N]",
		Short: "List the most recent runs",
		PreRunE: func(*cobra.Command, []string) error {
			if err := filter.Validate(); err != nil {
				return adminErr(err)
			}
			_, err := a.connConfig()
			return err
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withPool(cmd.Context(), func(pool *pgxpool.Pool) error {
				rows, err := admin.NewReader(pool).Runs(cmd.Context(), filter)
				if err := adminErr(err); err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				return a.output(out, rows, func() {
					tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "RUN\tPROJECT\tTRIGGER\tSCHEDULED FOR\tLAG\tSTATE\tATTEMPTS\tEVENTS\tIDEMPOTENCY KEY")
					for _, r := range rows {
						lag := "-"
						if ms, ok := r.LagMs(); ok {
							lag = fmt.Sprintf("%dms", ms)
						}
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", r.RunID, r.ProjectID, deref(r.TriggerID),
							msTime(r.ScheduledForMs), lag, r.State, r.Attempts, r.Events, r.IdempotencyKey)
					}
					tw.Flush()
				})
			})
		},
	}
	fl := list.Flags()
	fl.StringVar(&filter.Project, "project", "", "only this project")
	fl.StringVar(&filter.Trigger, "trigger", "", "only this trigger")
	fl.IntVar(&filter.Limit, "limit", 50, fmt.Sprintf("at most this many runs, newest first (1 … %d)", admin.MaxRunsLimit))
	cmd.AddCommand(list)
	return cmd
}

// msTime renders a database time in milliseconds; nil is "-".
func msTime(ms *int64) string {
	if ms == nil {
		return "-"
	}
	return time.UnixMilli(*ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
