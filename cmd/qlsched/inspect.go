package main

import (
	"fmt"
	"io"
	"math"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/app/cli"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
)

// document is a JSON output: the body's fields after a schema field naming the document and its
// version (docs/json.md), marshalled as cli.Document.
type document struct {
	schema string
	body   any
}

func (d document) MarshalJSON() ([]byte, error) {
	return cli.Document{Schema: d.schema, Body: d.body}.MarshalJSON()
}

// The one time format of the admin commands: RFC 3339, with milliseconds only where there are
// any. A database time (a claim's expiry, an admission) is shown in UTC ("Z"); an occurrence of
// a trigger is shown in the trigger's zone, with its offset and, where it is not UTC, its name.
// timeLayout is a time in the text output: RFC 3339 with milliseconds always, so a column of
// times keeps one width (".999" dropped trailing zeros: "…:55.74Z" next to "…:55.728Z").
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// jsonTimeLayout is a time in a JSON document's text fields (trigger show's upcoming "at" and
// "at_utc"): RFC 3339 with the milliseconds only when there are some, as the documents had.
const jsonTimeLayout = "2006-01-02T15:04:05.999Z07:00"

// utc renders a database time; nil is "-".
func utc(ms *int64) string {
	if ms == nil {
		return "-"
	}
	return time.UnixMilli(*ms).UTC().Format(timeLayout)
}

// inZone renders an occurrence in zone (an IANA name); UTC, or a zone Go cannot load, as utc.
func inZone(ms int64, zone string) string { return inZoneAs(timeLayout, ms, zone) }

func inZoneAs(layout string, ms int64, zone string) string {
	loc, err := time.LoadLocation(zone)
	if err != nil || loc == time.UTC || zone == "UTC" {
		return time.UnixMilli(ms).UTC().Format(layout)
	}
	return time.UnixMilli(ms).In(loc).Format(layout) + " " + zone
}

// nextFire renders a trigger's next fire time, marked when it is a preview, and why there is none.
func nextFire(t admin.Trigger) string {
	switch {
	case !t.Enabled:
		return "- (disabled)"
	case t.ProjectState != "active":
		return "- (project " + t.ProjectState + ")"
	case t.NextFireMs == nil:
		return "-"
	case t.NextFirePreview:
		return inZone(*t.NextFireMs, t.TimeZone) + " (preview)"
	case *t.NextFireMs <= t.NowMs:
		return inZone(*t.NextFireMs, t.TimeZone) + " (due)"
	}
	return inZone(*t.NextFireMs, t.TimeZone)
}

// claim renders a schedule row's claim.
func claim(t admin.Trigger) string {
	switch {
	case t.ClaimOwner == nil:
		return "-"
	case t.ClaimLive():
		return fmt.Sprintf("%s v%d, expires %s %s", *t.ClaimOwner, t.ClaimVersion, utc(t.ClaimExpiresAtMs), paren("in "+strings.TrimLeft(msFixed(*t.ClaimExpiresAtMs-t.NowMs, ""), " ")))
	}
	return fmt.Sprintf("%s v%d, expired %s", *t.ClaimOwner, t.ClaimVersion, utc(t.ClaimExpiresAtMs))
}

func ms(d int64) time.Duration { return time.Duration(d) * time.Millisecond }

func lag(r admin.Run) string {
	if l, ok := r.LagMs(); ok {
		return msFixed(l, "")
	}
	return "-"
}

func deref(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}

// list is an admin command that reads (a list or a show): validate the filter before connecting,
// read through the reader, print (adminCmd).
func (a *app) list(use, short, long string, validate func() error, read func(cmd *cobra.Command, r *admin.Reader) (document, func(io.Writer), error)) *cobra.Command {
	return a.adminCmd(&cobra.Command{Use: use, Short: short, Long: long, Annotations: map[string]string{readOnly: "yes"}},
		func(*cobra.Command) error { return validate() },
		func(cmd *cobra.Command, pool *dbconn.DB) (any, func(io.Writer), error) {
			return read(cmd, admin.NewReader(pool))
		})
}

func (a *app) projectListCmd() *cobra.Command {
	return a.list("list", "List projects with their state and counts", `project list shows every project: state
(active, paused or archived; only an active project's triggers are claimed), revision, tasks, triggers
and enabled triggers, each counted up to `+fmt.Sprint(admin.CountCap)+` ("`+fmt.Sprint(admin.CountCap)+`+" means at least: the counts cost one
probe per row, so they are bounded like a page). Read-only, one snapshot, any role with SELECT on
control_core.`,
		func() error { return nil },
		func(cmd *cobra.Command, r *admin.Reader) (document, func(io.Writer), error) {
			rows, err := r.Projects(cmd.Context())
			return document{"qlsched.project-list/v1", struct {
					Projects []admin.Project `json:"projects"`
				}{rows}}, func(out io.Writer) {
					tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "PROJECT\tSTATE\tREV\tTASKS\tTRIGGERS\tENABLED\tCREATED")
					for _, p := range rows {
						fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", p.ProjectID, p.State, p.Revision, atLeast(p.Tasks, admin.CountCap),
							atLeast(p.Triggers, admin.CountCap), atLeast(p.EnabledTriggers, admin.CountCap), utc(&p.CreatedAtMs))
					}
					tw.Flush()
				}, err
		})
}

// pageFlags adds --after and --limit to a paged list command (trigger list, task list): a page
// is one range of a primary key, so it costs its size whatever the table holds.
func pageFlags(cmd *cobra.Command, after *string, limit *int, rows, key string) {
	fl := cmd.Flags()
	fl.StringVar(after, "after", "", fmt.Sprintf("start after this %s: PROJECT/%s, as the previous page's \"more\" line (or next_after) gives it", rows[:len(rows)-1], key))
	fl.IntVar(limit, "limit", admin.DefaultListLimit, fmt.Sprintf("at most this many %s per page (1 … %d)", rows, admin.MaxListLimit))
}

// pageLimit refuses a --limit out of bounds before anything connects; the admin filter reads 0
// as its default, which the flag never gives.
func pageLimit(limit int) error {
	if limit < 1 || limit > admin.MaxListLimit {
		return cli.Usagef("--limit: %d is out of range: want 1 … %d", limit, admin.MaxListLimit)
	}
	return nil
}

// pageDoc is the paging part of a paged list's JSON: next_after is the key of the page's last
// row when more rows follow (pass it to --after), else null.
type pageDoc struct {
	More      bool    `json:"more"`
	NextAfter *string `json:"next_after"`
}

func newPageDoc(next string) pageDoc {
	if next == "" {
		return pageDoc{}
	}
	return pageDoc{More: true, NextAfter: &next}
}

// printMore ends a page's text: when more rows follow, the command line of the next page.
func printMore(out io.Writer, cmd *cobra.Command, shown int, next string) {
	if next == "" {
		return
	}
	line := cmd.CommandPath()
	// the command's own filters only: never the connection flags (a URL may hold a password)
	cmd.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
		if f.Changed && f.Name != "after" {
			line += " --" + f.Name + " " + shellQuote(f.Value.String())
		}
	})
	fmt.Fprintf(out, "more: %d shown, more follow; next page: %s --after %s\n", shown, line, shellQuote(next))
}

// shellWord: a value a POSIX shell reads as itself, unquoted.
var shellWord = regexp.MustCompile(`^[A-Za-z0-9_./:=@%+,-]+$`)

// shellQuote makes a value one shell word that reads back as itself, so the hint can be pasted
// (an empty --project printed bare made the shell read the next flag as its value).
func shellQuote(s string) string {
	if shellWord.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

const pagingHelp = `

Paged: at most --limit rows (default %d) in key order (project, then id); when more follow, a
last line "more: … next page: … --after PROJECT/ID" gives the command of the next page (JSON:
"more": true and "next_after"). A page is a range of the primary key, so each costs its size
however many rows the table holds; rows added or removed between pages do not repeat or skip
the others.`

func (a *app) taskListCmd() *cobra.Command {
	var f admin.TaskFilter
	cmd := a.list("list [--project ID] [--after PROJECT/TASK] [--limit N]", "List tasks with their head revision", `task list shows each task's head
revision, the remote_worker execution revision it pins (id and sha256 digest; never the spec,
which may hold secrets) and how many triggers use the task (counted up to `+fmt.Sprint(admin.MaxTaskTriggers)+`: "`+fmt.Sprint(admin.MaxTaskTriggers)+`+" means at least).`+
		fmt.Sprintf(pagingHelp, admin.DefaultListLimit),
		func() error { // a closure: the flags fill f after this call
			if err := pageLimit(f.Limit); err != nil {
				return err
			}
			return f.Validate()
		},
		func(cmd *cobra.Command, r *admin.Reader) (document, func(io.Writer), error) {
			page, err := r.TaskPage(cmd.Context(), f)
			rows := page.Tasks
			return document{"qlsched.task-list/v1", struct {
					Tasks []admin.Task `json:"tasks"`
					pageDoc
				}{rows, newPageDoc(page.Next)}}, func(out io.Writer) {
					tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "PROJECT\tTASK\tREV\tEXECUTION REVISION\tEXECUTION SHA256\tATTEMPTS\tBACKOFF\tLABELS\tTRIGGERS\tUPDATED")
					for _, t := range rows {
						triggers := atLeast(t.Triggers, admin.MaxTaskTriggers)
						fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", t.ProjectID, t.TaskID, t.Revision, t.ExecutionRevisionID,
							t.ExecutionDigest[:12]+"…", t.MaxAttempts, ms(t.RetryBackoffMs), labelsText(t.WorkerSelector), triggers, utc(&t.UpdatedAtMs))
					}
					tw.Flush()
					printMore(out, cmd, len(rows), page.Next)
				}, err
		})
	cmd.Flags().StringVar(&f.Project, "project", "", "only this project")
	pageFlags(cmd, &f.After, &f.Limit, "tasks", "TASK")
	return cmd
}

func (a *app) triggerListCmd() *cobra.Command {
	var f admin.TriggerFilter
	cmd := a.list("list [--project ID] [--after PROJECT/TRIGGER] [--limit N]", "List triggers with their schedule state", `trigger list shows each trigger's
head revision and schedule row. NEXT FIRE is the stored cursor once a replica initialised the row
("due" when it has passed); before that it is a preview, marked "(preview)": the first occurrence
of the spec in its zone after the database's time, which the first claim will set. Occurrences
are shown in the trigger's zone, database times in UTC, all RFC 3339.`+fmt.Sprintf(pagingHelp, admin.DefaultListLimit),
		func() error { // a closure: the flags fill f after this call
			if err := pageLimit(f.Limit); err != nil {
				return err
			}
			return f.Validate()
		},
		func(cmd *cobra.Command, r *admin.Reader) (document, func(io.Writer), error) {
			page, err := r.TriggerPage(cmd.Context(), f)
			rows := page.Triggers
			return document{"qlsched.trigger-list/v1", struct {
					Triggers []admin.Trigger `json:"triggers"`
					pageDoc
				}{rows, newPageDoc(page.Next)}}, func(out io.Writer) {
					tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "PROJECT\tTRIGGER\tREV\tCRON\tTIMEZONE\tMISFIRE\tGRACE\tENABLED\tNEXT FIRE\tLAST SCHEDULED\tCLAIM")
					for _, t := range rows {
						last := "-"
						if t.LastScheduledAtMs != nil {
							last = inZone(*t.LastScheduledAtMs, t.TimeZone)
						}
						fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%v\t%s\t%s\t%s\n", t.ProjectID, t.TriggerID, t.TriggerRevision,
							t.CronSpec, t.TimeZone, t.MisfirePolicy, time.Duration(t.MisfireGraceMs)*time.Millisecond, t.Enabled,
							nextFire(t), last, claim(t))
					}
					tw.Flush()
					printMore(out, cmd, len(rows), page.Next)
				}, err
		})
	cmd.Flags().StringVar(&f.Project, "project", "", "only this project")
	pageFlags(cmd, &f.After, &f.Limit, "triggers", "TRIGGER")
	return cmd
}

// occurrence is an upcoming occurrence in trigger show's JSON.
type occurrence struct {
	AtMs  int64  `json:"at_ms"`
	At    string `json:"at"`     // in the trigger's zone
	AtUTC string `json:"at_utc"` // in UTC
}

func (a *app) triggerShowCmd() *cobra.Command {
	s := admin.TriggerShow{}
	cmd := a.list("show --project ID --trigger ID [--upcoming 5] [--limit 5]", "Show one trigger: revision, schedule row, claim, next occurrences, last runs",
		`trigger show prints the head revision (spec, zone, misfire policy, enabled, pinned task
revision, digest), the schedule row (cursor, last scheduled occurrence, state version, claim and
its expiry by the database's time), the missed occurrences (how many the misfire decision passed
over without a Run since the row was created, and the latest of them: under skip every occurrence
older than the grace, under fire_once all but the one fired; one decision counts at most 10,000,
so after an outage of more occurrences than that the total is a lower bound), the next --upcoming
occurrences after the database's time in the trigger's zone and in UTC, and the newest --limit
Runs. Before a replica initialised the row the next fire is a preview (see trigger list).
Read-only, one snapshot.`,
		func() error { return s.Validate() },
		func(cmd *cobra.Command, r *admin.Reader) (document, func(io.Writer), error) {
			d, err := r.ShowTrigger(cmd.Context(), s)
			upcoming := make([]occurrence, 0, len(d.Upcoming))
			for _, at := range d.Upcoming {
				upcoming = append(upcoming, occurrence{at, inZoneAs(jsonTimeLayout, at, d.TimeZone), inZoneAs(jsonTimeLayout, at, "UTC")})
			}
			body := struct {
				admin.Trigger
				Upcoming        []occurrence `json:"upcoming"`
				Runs            []admin.Run  `json:"runs"`
				MissedTotal     int64        `json:"missed_total"`
				LastMissedForMs *int64       `json:"last_missed_for_ms"`
				LastMissedFor   *string      `json:"last_missed_for"`
			}{d.Trigger, upcoming, d.Runs, d.MissedTotal, d.LastMissedForMs, nil}
			if d.LastMissedForMs != nil {
				at := inZoneAs(jsonTimeLayout, *d.LastMissedForMs, d.TimeZone)
				body.LastMissedFor = &at
			}
			return document{"qlsched.trigger-show/v1", body}, func(out io.Writer) { printTriggerShow(out, d, upcoming) }, err
		})
	fl := cmd.Flags()
	fl.StringVar(&s.Project, "project", "", "project id")
	fl.StringVar(&s.Trigger, "trigger", "", "trigger id")
	fl.IntVar(&s.Upcoming, "upcoming", 5, fmt.Sprintf("how many next occurrences (1 … %d)", admin.MaxShowCount))
	fl.IntVar(&s.Runs, "limit", 5, fmt.Sprintf("how many of the newest Runs (1 … %d)", admin.MaxShowCount))
	return cmd
}

func printTriggerShow(out io.Writer, d admin.TriggerDetail, upcoming []occurrence) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("trigger", d.ProjectID+"/"+d.TriggerID)
	row("project state", d.ProjectState)
	row("revision", fmt.Sprintf("%d (published %s, sha256 %s)", d.TriggerRevision, utc(&d.RevisionCreatedMs), d.ContentDigest))
	row("cron", fmt.Sprintf("%q in %s", d.CronSpec, d.TimeZone))
	row("misfire", fmt.Sprintf("%s, grace %s", d.MisfirePolicy, time.Duration(d.MisfireGraceMs)*time.Millisecond))
	row("enabled", fmt.Sprint(d.Enabled))
	row("task", fmt.Sprintf("%s revision %d", d.TaskID, d.TaskRevision))
	row("next fire", nextFire(d.Trigger))
	cursor := "- (not initialised: no replica has claimed this revision yet)"
	if d.NextFireAtMs != nil {
		cursor = inZone(*d.NextFireAtMs, d.TimeZone)
	}
	row("cursor", cursor)
	last := "-"
	if d.LastScheduledAtMs != nil {
		last = inZone(*d.LastScheduledAtMs, d.TimeZone)
	}
	row("last scheduled", last)
	missed := "0"
	if d.MissedTotal > 0 || d.LastMissedForMs != nil {
		missed = fmt.Sprint(d.MissedTotal)
		if d.LastMissedForMs != nil {
			missed += ", the last " + inZone(*d.LastMissedForMs, d.TimeZone)
		}
		missed += fmt.Sprintf(" (passed over without a Run: %s, grace %s)", d.MisfirePolicy, time.Duration(d.MisfireGraceMs)*time.Millisecond)
	}
	row("missed", missed)
	row("state version", fmt.Sprint(d.StateVersion))
	row("claim", claim(d.Trigger))
	row("database time", utc(&d.NowMs))
	if d.ScheduleError != "" {
		row("schedule error", d.ScheduleError)
	}
	tw.Flush()

	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if len(upcoming) > 0 && upcoming[0].At == upcoming[0].AtUTC { // a UTC trigger: one column says it all
		fmt.Fprintf(tw, "UPCOMING (%s)\n", d.TimeZone)
		for _, o := range upcoming {
			fmt.Fprintf(tw, "%s\n", o.At)
		}
	} else {
		fmt.Fprintf(tw, "UPCOMING (%s)\tUTC\n", d.TimeZone)
		for _, o := range upcoming {
			fmt.Fprintf(tw, "%s\t%s\n", o.At, o.AtUTC)
		}
	}
	if !d.Enabled {
		fmt.Fprintln(tw, "(disabled: none of these is claimed)\t")
	}
	tw.Flush()

	fmt.Fprintln(out)
	printRuns(out, d.Runs)
}

func printRuns(out io.Writer, runs []admin.Run) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tPROJECT\tTRIGGER\tSCHEDULED FOR\tQUEUED AT\tLAG\tSTATE\tATTEMPTS\tEVENTS")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", r.RunID, r.ProjectID, deref(r.TriggerID),
			utc(r.ScheduledForMs), utc(r.QueuedAtMs), lag(r), r.State, r.Attempts, r.Events)
	}
	if len(runs) == 0 {
		fmt.Fprintln(tw, "(no runs)\t\t\t\t\t\t\t\t")
	}
	tw.Flush()
}

func (a *app) runsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "runs", Short: "Inspect admitted runs"}
	var (
		f     admin.RunFilter
		since string
	)
	list := a.list("list [--project ID] [--trigger ID] [--state STATE] [--since 1h|TIME] [--limit N]", "List the most recent runs",
		`runs list shows admitted Runs, newest first: the occurrence they are for, when they were queued,
the admission lag (queued minus scheduled, both database times), state, Attempts and Events.
--state keeps one state (`+strings.Join(admin.RunStates, ", ")+`); --since keeps the Runs
admitted within a duration before the database's time (1h, 30m) or at or after an RFC 3339 time.
With --trigger the Runs are the trigger's, newest occurrence first, and --state and --since
look among its newest `+fmt.Sprint(admin.TriggerRunsWalk)+` occurrences per project. Each project is read as
one index range of at most --limit Runs, merged across projects: a filter that matches nothing
reads nothing.

A Run stays queued until a dispatcher (qlsched dispatch) offers its claimed remote_worker
Attempt to a worker; a retried Run is queued again with a new Attempt (docs/dispatch.md).`,
		func() error {
			f.SinceMs, f.Within = 0, 0
			if since != "" {
				d, derr := time.ParseDuration(since)
				at, terr := time.Parse(time.RFC3339Nano, since)
				switch {
				case derr == nil && d > 0:
					f.Within = d
				case terr == nil: // every Run was admitted after the epoch: an earlier time keeps them all
					f.SinceMs = max(at.UnixMilli(), 1)
				case derr != nil && durationShaped.MatchString(since):
					return cli.Usagef("--since %q: longer than a duration can be (%s at most)", since, time.Duration(math.MaxInt64).Truncate(time.Hour))
				default:
					return cli.Usagef("--since %q: want a positive duration (1h, 30m) or an RFC 3339 time (2026-01-02T03:04:05Z)", since)
				}
			}
			return f.Validate()
		},
		func(cmd *cobra.Command, r *admin.Reader) (document, func(io.Writer), error) {
			rows, err := r.Runs(cmd.Context(), f)
			return document{"qlsched.runs-list/v1", struct {
				Runs []admin.Run `json:"runs"`
			}{rows}}, func(out io.Writer) { printRuns(out, rows) }, err
		})
	fl := list.Flags()
	fl.StringVar(&f.Project, "project", "", "only this project")
	fl.StringVar(&f.Trigger, "trigger", "", "only this trigger")
	fl.StringVar(&f.State, "state", "", "only this state: "+strings.Join(admin.RunStates, ", "))
	fl.StringVar(&since, "since", "", "only Runs admitted within this duration (1h) or at or after this RFC 3339 time")
	fl.IntVar(&f.Limit, "limit", 50, fmt.Sprintf("at most this many runs, newest first (1 … %d)", admin.MaxRunsLimit))

	cmd.AddCommand(list, a.runsShowCmd())
	return cmd
}

// durationShaped matches what time.ParseDuration reads apart from its range: digits with units.
var durationShaped = regexp.MustCompile(`^([0-9]*\.?[0-9]+(ns|us|µs|ms|s|m|h))+$`)

// atLeast prints a count taken up to limit: "N+" at the limit, where it means at least N.
func atLeast(n, limit int64) string {
	if n >= limit {
		return fmt.Sprintf("%d+", n)
	}
	return fmt.Sprint(n)
}
