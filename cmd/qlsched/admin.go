package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/app/cli"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/base/limits"
	"github.com/qlcontrol/controlcore/roles"
	"github.com/qlcontrol/controlcore/schedule"
)

// flagOf names the command-line flag that gives an input field of package admin.
func flagOf(field string) (string, bool) {
	switch field {
	case admin.FieldProject, admin.FieldTask, admin.FieldTrigger, admin.FieldCron, admin.FieldTimeZone,
		admin.FieldMisfire, admin.FieldLimit, admin.FieldState, admin.FieldSince, admin.FieldUpcoming, admin.FieldAfter:
		return "--" + field, true
	case admin.FieldExecutorSpec:
		return "--executor-spec", true
	case admin.FieldMisfireGrace:
		return "--misfire-grace", true
	case admin.FieldRun:
		return "RUN_ID", true
	case admin.FieldMaxAttempts:
		return "--max-attempts", true
	case admin.FieldRetryBackoff:
		return "--retry-backoff", true
	case admin.FieldWorkerLabel:
		return "--worker-label", true
	case admin.FieldTokenName, admin.FieldTokenID, admin.FieldReason:
		return "--" + field, true
	case admin.FieldOlderThan:
		return "--older-than", true
	case admin.FieldBatch:
		return "--batch", true
	}
	return "", false
}

// adminErr maps errors of package admin onto the exit-code contract: a refused field is bad
// usage (exit 2) and names the flag the user gave it with; a missing object is a problem found
// (exit 1).
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
	case errors.Is(err, admin.ErrNotFound):
		return &cli.ProblemError{Err: err}
	}
	return err
}

// withDB runs fn on a database handle for the resolved connection.
func (a *app) withDB(ctx context.Context, fn func(*dbconn.DB) error) error {
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

// output prints v as JSON (a document whose schema field names it, docs/json.md) or runs text.
func (a *app) output(w io.Writer, v any, text func()) error {
	return cli.Output(w, a.format, v, text)
}

// adminCmd gives cmd the shape every day-2 admin command shares: before anything connects,
// validate checks the input (an admin field error names its flag, adminErr) and the connection
// flags resolve; then do runs on one handle, and what it returns is printed, as JSON or as its text.
// validate may be nil.
func (a *app) adminCmd(cmd *cobra.Command, validate func(*cobra.Command) error, do func(*cobra.Command, *dbconn.DB) (any, func(io.Writer), error)) *cobra.Command {
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		if validate != nil {
			if err := adminErr(validate(cmd)); err != nil {
				return err
			}
		}
		_, err := a.connConfig()
		return err
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		return a.roleHint(cmd, a.withDB(cmd.Context(), func(pool *dbconn.DB) error {
			doc, text, err := do(cmd, pool)
			if err := adminErr(err); err != nil {
				return err
			}
			if _, ok := doc.(unshownUndo); ok {
				// A closed stdout pipe would kill the process with SIGPIPE before the undo ran;
				// while SIGPIPE is asked for, the write fails with EPIPE instead.
				sigpipe := make(chan os.Signal, 1)
				signal.Notify(sigpipe, syscall.SIGPIPE)
				defer signal.Stop(sigpipe)
			}
			out := &recordingWriter{w: cmd.OutOrStdout()}
			err = a.output(out, doc, func() { text(out) })
			if err == nil {
				err = out.err
			}
			if err == nil {
				return nil
			}
			if u, ok := doc.(unshownUndo); ok { // what must not outlive an output nobody saw
				return u.undoUnshown(cmd, pool, err)
			}
			return fmt.Errorf("writing the output: %w", err)
		}))
	}
	return cmd
}

// readOnly is the annotation of a command that any role reading control_core may run (list,
// status, …); a command without it writes, as the admin role.
const readOnly = "qlsched/read-only"

// adminRead is the annotation of a read-only command whose table only the admin role may read
// (replicas: the runtime role reaches control_core.replicas only through functions); its value
// says why, for the hint.
const adminRead = "qlsched/admin-read"

// roleHint adds to a permission denied (SQLSTATE 42501, from the server at connection or at a
// statement) the role cmd needs and the role it ran as. The admin role's name follows the
// connected role's prefix when that role is one of the four (acme_runtime: acme_admin), else the
// default ql_admin.
func (a *app) roleHint(cmd *cobra.Command, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.InsufficientPrivilege || a.conn == nil {
		return err
	}
	cc := a.conn.Pool.ConnConfig
	as := cc.User
	if r := cc.RuntimeParams["role"]; r != "" {
		as = r
	}
	names, _ := roles.NewNames(roles.DefaultPrefix)
	for _, suffix := range []string{"owner", "admin", "runtime", "worker_ingress"} {
		if p, ok := strings.CutSuffix(as, suffix); ok && p != "" {
			if n, err := roles.NewNames(p); err == nil {
				names = n
			}
			break
		}
	}
	need := fmt.Sprintf("admin commands run as the admin role %s", names.Admin)
	if why := cmd.Annotations[adminRead]; why != "" {
		need = fmt.Sprintf("%s runs as the admin role %s (%s)", cmd.CommandPath(), names.Admin, why)
	} else if cmd.Annotations[readOnly] != "" {
		need = fmt.Sprintf("%s runs as a role that may read control_core: %s or %s", cmd.CommandPath(), names.Admin, names.Runtime)
		if as == names.Runtime {
			need = fmt.Sprintf("%s runs as %s or %s; connected as %s, which has the runtime role's name but lacks its grants "+
				"(qlmigrate up as the owner role, with the role prefix %s)", cmd.CommandPath(), names.Admin, names.Runtime, a.conn.Redact(as), names.Prefix)
			return &hinted{msg: fmt.Sprintf("%s\n  hint: %s", err, need), err: err}
		}
	}
	if as == names.Admin { // naming the role it ran as would be no cure
		need = fmt.Sprintf("connected as %s, which has the admin role's name but lacks the admin role's grants "+
			"(qlmigrate up as the owner role, with the role prefix %s), or is not this deployment's admin role", a.conn.Redact(as), names.Prefix)
		return &hinted{msg: fmt.Sprintf("%s\n  hint: %s", err, need), err: err}
	}
	return &hinted{msg: fmt.Sprintf("%s\n  hint: %s; connected as %s", err, need, a.conn.Redact(as)), err: err}
}

// hinted is err with a hint appended to its message; errors.Is/As see err.
type hinted struct {
	msg string
	err error
}

func (h *hinted) Error() string { return h.msg }
func (h *hinted) Unwrap() error { return h.err }

// recordingWriter keeps the first write error, so a text output that failed (a full disk, a
// closed pipe) exits nonzero like a JSON one, instead of 0 with nothing printed.
type recordingWriter struct {
	w   io.Writer
	err error
}

func (r *recordingWriter) Write(b []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	n, err := r.w.Write(b)
	r.err = err
	return n, err
}

// unshownUndo is a document whose write must be undone when its output failed: a secret shown
// once that nobody saw.
type unshownUndo interface {
	undoUnshown(cmd *cobra.Command, pool *dbconn.DB, writeErr error) error
}

// publish is an admin command that writes through the publisher (the admin role).
func (a *app) publish(cmd *cobra.Command, validate func(*cobra.Command) error, write func(*cobra.Command, *admin.Publisher) (any, func(io.Writer), error)) *cobra.Command {
	return a.adminCmd(cmd, validate, func(cmd *cobra.Command, pool *dbconn.DB) (any, func(io.Writer), error) {
		return write(cmd, admin.NewPublisher(pool))
	})
}

func (a *app) projectCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "project", Short: "Manage and list projects (admin role)"}
	var project string
	create := a.publish(&cobra.Command{
		Use:   "create --project ID",
		Short: "Create an active project (idempotent)",
		Long: `project create creates an active project at revision 1 in one admin transaction, with an audit row.
A project that already exists is left as it is: the command says so and exits 0, so a script
can run it again.`,
	}, func(*cobra.Command) error {
		return admin.ValidateID(admin.FieldProject, project)
	}, func(cmd *cobra.Command, pub *admin.Publisher) (any, func(io.Writer), error) {
		res, err := pub.CreateProject(cmd.Context(), project)
		return document{"qlsched.project-create/v1", res}, func(out io.Writer) {
			if res.Created {
				fmt.Fprintf(out, "project %s created (revision %d, %s)\n", project, res.Revision, res.State)
			} else {
				fmt.Fprintf(out, "project %s unchanged: it exists (revision %d, %s)\n", project, res.Revision, res.State)
			}
		}, err
	})
	create.Flags().StringVar(&project, "project", "", "project id: "+idRule)
	cmd.AddCommand(create, a.projectStateCmd("pause"), a.projectStateCmd("resume"), a.projectListCmd())
	return cmd
}

// projectStateCmd is project pause or project resume (one document schema for both:
// qlsched.project-state/v1, its action field says which).
func (a *app) projectStateCmd(action string) *cobra.Command {
	var project string
	short := map[string]string{
		"pause":  "Pause a project: nothing of it is claimed until it is resumed (idempotent)",
		"resume": "Resume a paused project: the misfire policy decides about what was missed (idempotent)",
	}[action]
	cmd := a.publish(&cobra.Command{
		Use:   action + " --project ID",
		Short: short,
		Long: `project pause sets a project's state to paused and project resume sets it back to active, each in
one admin transaction under the audited project lock, at the next project revision, with a
project.pause or project.resume audit row. A claim taken before the pause admits nothing (the
admit re-checks the project's state, revision and digest). Nothing of a paused project is claimed;
its triggers' schedule rows and cursors are kept, so on resume the next claim of each trigger
decides about the occurrences that fell while paused exactly as after an outage, by the trigger's
misfire grace (misfire_grace_ms, 60 s by default) and policy: an occurrence at most the grace
older than the resume is on time and gets its Run; the older ones are missed: skip admits none of
them, fire_once admits one Run, for the latest. Every missed occurrence passed over without a Run
is counted (qlsched trigger show: missed, and the replica's qlsched_missed_occurrences_total), so
a pause longer than the grace shows up there and in the QlschedMissedOccurrences alert. Publishes
(and qlsched apply) into a paused project are allowed; they take effect when it is resumed, and a
trigger republished while paused restarts at its next occurrence after the resume (a new revision
clears its cursor): the occurrences of its pause are neither fired nor counted as missed.

Idempotent: pausing a paused project (resuming an active one) writes nothing, says "unchanged" and
exits 0. An archived project is refused (exit 1).`,
		Example: "  qlsched project " + action + " --project billing",
	}, func(*cobra.Command) error {
		return admin.ValidateID(admin.FieldProject, project)
	}, func(cmd *cobra.Command, pub *admin.Publisher) (any, func(io.Writer), error) {
		do := pub.PauseProject
		if action == "resume" {
			do = pub.ResumeProject
		}
		res, err := do(cmd.Context(), project)
		return document{"qlsched.project-state/v1", res}, func(out io.Writer) {
			if res.Unchanged {
				fmt.Fprintf(out, "project %s unchanged: already %s (revision %d)\n", project, res.State, res.Revision)
			} else {
				fmt.Fprintf(out, "project %s %s (revision %d)\n", project, res.State, res.Revision)
			}
		}, err
	})
	cmd.Flags().StringVar(&project, "project", "", "project id: "+idRule)
	return cmd
}

const idRule = limits.IDRule

func (a *app) taskCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "task", Short: "Publish and roll out (admin role) and list tasks"}
	var (
		t       admin.TaskSpec
		spec    string
		backoff time.Duration
		labels  []string
	)
	publish := a.publish(&cobra.Command{
		Use:   "publish --project ID --task ID --executor-spec JSON [--max-attempts N] [--retry-backoff D] [--worker-label k=v …]",
		Short: "Publish a new task revision pinned to a remote_worker execution revision",
		Long: `task publish creates the next revision of a task in one admin transaction. The revision pins
a remote_worker execution revision whose digest is the sha256 of the spec's canonical form (its
PostgreSQL jsonb text); identical specs share one execution revision. Admission re-verifies that
digest, so a spec edited behind its digest admits nothing.

Retry policy and selector, part of the revision and of its digest: --max-attempts (1 … 100,
default 1: no retries) bounds the Attempts a Run takes (a failed Attempt, or one whose lease
expired, is retried while Attempts remain); --retry-backoff (0 … 24h, whole milliseconds; default
10s when --max-attempts is above 1, else 0) is the delay before the second Attempt, doubled for
each later one (capped at 24h); --worker-label k=v (repeatable, at most 16) offers the task's Runs
only to worker sessions that have every one of these labels.

Idempotent: a spec, policy and selector equal to the head revision's write nothing, say
"unchanged" and exit 0; a changed policy alone is a new revision.

A trigger pins a task revision: publishing a task does not move its triggers. The output names
the triggers still on older revisions of the task and the command that moves them
(qlsched task rollout).`,
		Example: `  qlsched task publish --project billing --task invoice --executor-spec '{"image":"billing/invoice:1.4"}'`,
	}, func(cmd *cobra.Command) error {
		// the publisher's own checks, before connecting (every rule jsonb and the size
		// bound hold; the message names the position and the rule, never the spec's content)
		t.ExecutorSpec = []byte(spec)
		if t.MaxAttempts < 1 { // 0 would be the publisher's "default"; the flag's default is 1
			return cli.Usagef("--max-attempts: %d is out of range: want 1 … %d", t.MaxAttempts, admin.MaxMaxAttempts)
		}
		t.RetryBackoff = nil
		if cmd.Flags().Changed("retry-backoff") {
			t.RetryBackoff = &backoff
		}
		sel, err := admin.ParseWorkerLabels(labels)
		if err != nil {
			return err
		}
		t.WorkerLabels = sel
		return t.Validate()
	}, func(cmd *cobra.Command, p *admin.Publisher) (any, func(io.Writer), error) {
		pub, err := p.PublishTask(cmd.Context(), t)
		return taskPublishedDoc(pub), func(out io.Writer) {
			verb := "published"
			if pub.Unchanged {
				verb = "unchanged: the head revision holds this spec"
			}
			fmt.Fprintf(out, "task %s/%s revision %d %s; execution revision %s (sha256 %s)\n",
				t.Project, t.Task, pub.Revision, verb, pub.ExecutionRevisionID, pub.ExecutionDigest)
			fmt.Fprintf(out, "  max attempts %d, retry backoff %s, worker labels %s\n",
				pub.MaxAttempts, ms(pub.RetryBackoffMs), labelsText(pub.WorkerSelector))
			writeStaleTriggers(out, pub)
		}, err
	})
	fl := publish.Flags()
	fl.StringVar(&t.Project, "project", "", "project id")
	fl.StringVar(&t.Task, "task", "", "task id: "+idRule)
	fl.IntVar(&t.MaxAttempts, "max-attempts", 1, fmt.Sprintf("Attempts a Run may take, 1 … %d (1: no retries)", admin.MaxMaxAttempts))
	fl.DurationVar(&backoff, "retry-backoff", 0, "delay before the second Attempt, doubled after each, 0 … 24h (default 10s when --max-attempts > 1, else 0)")
	fl.StringArrayVar(&labels, "worker-label", nil, fmt.Sprintf("a label k=v a worker must have to be offered the task's Runs (repeatable, at most %d)", admin.MaxWorkerLabels))
	fl.StringVar(&spec, "executor-spec", "", "the remote_worker execution spec: a JSON object of at most 64 KiB that PostgreSQL jsonb stores (no \\u0000, no unpaired surrogate escapes, numbers within numeric's range, at most 1000 levels deep)")
	cmd.AddCommand(publish, a.taskListCmd(), a.taskRolloutCmd())
	return cmd
}

func (a *app) triggerCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "trigger", Short: "Publish, disable, enable, list, show, run now and archive cron triggers"}
	var (
		c                         admin.TriggerChange
		task, cron, zone, misfire string
		grace                     time.Duration
		disabled                  bool
	)
	publish := a.publish(&cobra.Command{
		Use:   "publish --project ID --trigger ID [--task ID] [--cron SPEC] [--timezone ZONE] [--misfire POLICY] [--misfire-grace DURATION] [--disabled]",
		Short: "Publish a cron trigger revision, changing only the flags given",
		Long: `trigger publish creates the next revision of a cron trigger and in the same admin transaction
upserts its schedule row: the cursor and any claim are cleared and the state and claim versions
incremented, so a replica still holding a claim on the old revision can never admit with it. The
first occurrence is the first one after the next claim.

Only what you give changes. On an existing trigger every flag you leave out keeps the head
revision's value, never a default: republishing a Europe/Berlin fire_once trigger with only
--disabled keeps Europe/Berlin and fire_once. --disabled=false enables. --task pins that task's
current revision (give it again to pick up a newer task revision); without --task the pinned
task revision stays. A new trigger needs --task and --cron; its defaults are --timezone UTC,
--misfire skip, --misfire-grace 60s, enabled.

Idempotent: content equal to the head revision's (the pinned task revision included) writes
nothing, keeps the cursor, says "unchanged" and exits 0.

Cron: five fields (minute hour day-of-month month day-of-week), an optional leading seconds
field, or one of @yearly @annually @monthly @weekly @daily @midnight @hourly (@annually is
@yearly, @midnight is @daily). @every is an interval, not cron: rejected.
The spec is stored exactly as given: at most 200 characters of printable ASCII, and leading or
trailing spaces are refused (not trimmed). --timezone: an IANA name of at most 64 characters.
--misfire-grace: an occurrence at most this late (when the round decides it) is on time under
both policies and gets its Run; one later than that is missed, and the policy decides (a Go
duration, 1s to 24h, whole milliseconds; default 60s, Quartz's misfire threshold).
--misfire skip: a missed occurrence gets no Run.
--misfire fire_once: of the occurrences missed at once (an outage), admit one Run for the latest,
never a backlog (docs/scheduling.md has the exact rule).`,
		Example: `  qlsched trigger publish --project billing --trigger nightly --task invoice --cron "0 3 * * *" --timezone Europe/Berlin --misfire fire_once
  qlsched trigger publish --project billing --trigger nightly --cron "30 3 * * *"   # only the time changes`,
	}, func(cmd *cobra.Command) error {
		c = admin.TriggerChange{Project: c.Project, Trigger: c.Trigger}
		given := cmd.Flags().Changed
		if given("task") {
			c.Task = &task
		}
		if given("cron") {
			c.Cron = &cron
		}
		if given("timezone") {
			c.TimeZone = &zone
		}
		if given("misfire") {
			m := schedule.MisfirePolicy(misfire)
			c.Misfire = &m
		}
		if given("misfire-grace") {
			c.MisfireGrace = &grace
		}
		if given("disabled") {
			enabled := !disabled
			c.Enabled = &enabled
		}
		return c.Validate()
	}, func(cmd *cobra.Command, p *admin.Publisher) (any, func(io.Writer), error) {
		pub, err := p.ChangeTrigger(cmd.Context(), c)
		doc, text := triggerPublished("qlsched.trigger-publish/v1", "published", pub)
		return doc, text, err
	})
	fl := publish.Flags()
	fl.StringVar(&c.Project, "project", "", "project id")
	fl.StringVar(&c.Trigger, "trigger", "", "trigger id: "+idRule)
	fl.StringVar(&task, "task", "", "task id (must be published); pins its current revision (a new trigger: required; else: kept)")
	fl.StringVar(&cron, "cron", "", "cron spec, e.g. \"*/5 * * * *\" ("+limits.CronRule+"; a new trigger: required; else: kept)")
	fl.StringVar(&zone, "timezone", "", "IANA time zone, e.g. Europe/Berlin ("+limits.TimeZoneRule+"; a new trigger: UTC; else: kept)")
	fl.StringVar(&misfire, "misfire", "", "misfire policy: skip or fire_once (a new trigger: skip; else: kept)")
	// no flag default: it is used only when given (a new trigger's default is the publisher's)
	fl.DurationVar(&grace, "misfire-grace", 0,
		"how late an occurrence may be and still be on time, e.g. 90s, 1s to 24h (a new trigger: 60s; else: kept)")
	fl.BoolVar(&disabled, "disabled", false, "publish the revision disabled, never claimed (--disabled=false: enabled; a new trigger: enabled; else: kept)")

	cmd.AddCommand(publish, a.triggerToggleCmd(false), a.triggerToggleCmd(true), a.triggerListCmd(), a.triggerShowCmd(),
		a.triggerRunNowCmd(), a.triggerArchiveCmd())
	return cmd
}

// triggerToggleCmd is trigger disable or trigger enable: a new revision flipping only enabled.
func (a *app) triggerToggleCmd(enable bool) *cobra.Command {
	var project, trigger string
	name, long := "disable", `trigger disable publishes a new revision of the trigger that differs from the head only in
being disabled: it is never claimed, so it admits nothing until enabled. Its schedule row is
reset like any new revision's (cursor and claim cleared). An already disabled trigger is
"unchanged" (exit 0).`
	if enable {
		name, long = "enable", `trigger enable publishes a new revision of the trigger that differs from the head only in
being enabled. The new revision starts from a cleared cursor: its first occurrence is the first
one after the next claim, so nothing that fell while it was disabled is admitted (unlike a
project resume, where the misfire policy decides). An already enabled trigger is "unchanged"
(exit 0).`
	}
	cmd := a.publish(&cobra.Command{
		Use:   name + " --project ID --trigger ID",
		Short: strings.ToUpper(name[:1]) + name[1:] + " a trigger: a new revision that flips only enabled",
		Long:  long,
	}, func(*cobra.Command) error {
		return admin.TriggerChange{Project: project, Trigger: trigger}.Validate()
	}, func(cmd *cobra.Command, pub *admin.Publisher) (any, func(io.Writer), error) {
		do := pub.DisableTrigger
		if enable {
			do = pub.EnableTrigger
		}
		res, err := do(cmd.Context(), project, trigger)
		doc, text := triggerPublished("qlsched.trigger-"+name+"/v1", name+"d", res)
		return doc, text, err
	})
	cmd.Flags().StringVar(&project, "project", "", "project id")
	cmd.Flags().StringVar(&trigger, "trigger", "", "trigger id")
	return cmd
}

// triggerPublished is the report of a publish, disable or enable.
func triggerPublished(schema, verb string, pub admin.TriggerPublished) (document, func(io.Writer)) {
	return document{schema, pub}, func(out io.Writer) {
		what := fmt.Sprintf("revision %d %s (changed: %s)", pub.Revision, verb, strings.Join(pub.Changed, ", "))
		switch {
		case pub.Created:
			what = fmt.Sprintf("created (revision %d)", pub.Revision)
		case pub.Unchanged:
			what = fmt.Sprintf("unchanged: revision %d already holds this content; nothing written, cursor kept", pub.Revision)
		}
		fmt.Fprintf(out, "trigger %s/%s %s\n  task %s revision %d, cron %q, timezone %s, misfire %s (grace %s), enabled %v\n",
			pub.ProjectID, pub.TriggerID, what, pub.TaskID, pub.TaskRevision, pub.Cron, pub.TimeZone, pub.Misfire,
			time.Duration(pub.MisfireGraceMs)*time.Millisecond, pub.Enabled)
		if pub.QueuedForInitialisation {
			fmt.Fprintln(out, "  1 trigger queued for initialisation: a replica gives it its first cursor, Next(now)")
		}
	}
}
