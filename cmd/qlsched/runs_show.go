package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/app/cli"
)

// runsShowCmd is `qlsched runs show`: one Run's whole story (issue 33).
func (a *app) runsShowCmd() *cobra.Command {
	var (
		runID uuid.UUID
		l     admin.StoryLimits
	)
	cmd := a.list("show RUN_ID [--offers N] [--events N]", "Show one Run's whole story: admission, offers, attempts, output, timeline",
		`runs show tells one Run's story, read in one snapshot:
  admission   trigger and occurrence (or started by hand), idempotency key, when it was admitted
              and queued (database times, UTC), the admission lag, its owner (runtime: admitted
              by a scheduler replica; the replica is not recorded on the Run), its retry policy
  attempts    each with its worker (name, token name, session), the offer it took, its lease
              (version, granted, expiry as the last heartbeat moved it, end), started and
              finished, the worker's report: exit status or signal, how long it ran, the error
              (kind and message, or the loop's reason) and the tail of the job's output
  offers      the newest --offers, each with its worker and answer (acked, rejected, or expired
              unanswered), and how many there are
  timeline    the newest --events events in order, each with its time after admission

Never shown: the executor spec, the callback token or its hash, a worker token or its hash.
The output tail is the job's own output (docs/dispatch.md): whatever the job printed is shown.
A RUN_ID that is not a UUID exits 2 before anything is opened; an unknown one exits 1.
--format json: qlsched.runs-show/v1 (docs/json.md).`,
		func() error {
			if l.Offers < 1 || l.Offers > admin.MaxStoryList {
				return cli.Usagef("--offers: %d is out of range: want 1 … %d", l.Offers, admin.MaxStoryList)
			}
			if l.Events < 1 || l.Events > admin.MaxStoryList {
				return cli.Usagef("--events: %d is out of range: want 1 … %d", l.Events, admin.MaxStoryList)
			}
			return nil
		},
		func(cmd *cobra.Command, r *admin.Reader) (document, func(io.Writer), error) {
			s, err := r.RunStory(cmd.Context(), runID, l)
			return document{"qlsched.runs-show/v1", s}, func(out io.Writer) { printRunStory(out, s) }, err
		})
	cmd.Args = func(_ *cobra.Command, args []string) error {
		if len(args) != 1 {
			return cli.Usagef("runs show takes one RUN_ID (a UUID), got %d arguments", len(args))
		}
		id, err := uuid.Parse(args[0])
		if err != nil {
			return cli.Usagef("RUN_ID %q: not a UUID", args[0])
		}
		if id == uuid.Nil {
			return cli.Usagef("RUN_ID %s: the nil UUID names no Run", args[0])
		}
		runID = id
		return nil
	}
	cmd.Flags().IntVar(&l.Offers, "offers", admin.DefaultStoryOffers, fmt.Sprintf("list the newest N offers (1 … %d)", admin.MaxStoryList))
	cmd.Flags().IntVar(&l.Events, "events", admin.DefaultStoryEvents, fmt.Sprintf("list the newest N events (1 … %d)", admin.MaxStoryList))
	return cmd
}

// printRunStory prints a Run's story for a reader in a hurry: the Run, each Attempt as a block,
// the offers, then the events as a timeline with times after admission.
func printRunStory(out io.Writer, s admin.RunStory) {
	since := func(at int64) string { return msFixed(at-s.CreatedAtMs, "+") }
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("run", s.RunID.String())
	row("state", s.State)
	row("project", s.ProjectID)
	row("task", fmt.Sprintf("%s revision %d (execution revision %s)", s.TaskID, s.TaskRevision, s.ExecutionRevisionID))
	if s.TriggerID != nil && s.TriggerRevision != nil {
		row("trigger", fmt.Sprintf("%s revision %d", *s.TriggerID, *s.TriggerRevision))
	} else {
		row("trigger", "- (started by hand)")
	}
	row("scheduled for", utc(s.ScheduledForMs))
	row("admitted at", fmt.Sprintf("%s (owner %s)", utc(&s.CreatedAtMs), s.Owner))
	row("idempotency key", s.IdempotencyKey)
	row("queued at", utc(s.QueuedAtMs))
	lagText := "-"
	if s.LagMs != nil {
		lagText = strings.TrimLeft(msFixed(*s.LagMs, ""), " ")
	}
	row("lag", lagText)
	policy := fmt.Sprintf("at most %d attempts", s.MaxAttempts)
	if s.MaxAttempts > 1 {
		policy += fmt.Sprintf(", backoff %s doubling", ms(s.RetryBackoffMs))
	}
	row("retry policy", policy)
	if s.RetryAtMs != nil && s.State == "queued" {
		row("retry at", utc(s.RetryAtMs))
	}
	row("cancel requested", utc(s.CancelRequestedAtMs))
	finished := utc(s.FinishedAtMs)
	if s.FinishedAtMs != nil {
		finished += " " + paren(since(*s.FinishedAtMs)+" after admission")
	}
	row("finished", finished)
	switch s.State {
	case "queued":
		row("note", "queued: waiting for a dispatcher to offer its Attempt to a worker (qlsched workers list)")
	case "dispatching":
		row("note", "dispatching: offered to a worker, waiting for its ACK")
	}
	tw.Flush()

	for _, x := range s.Attempts {
		fmt.Fprintln(out)
		printStoryAttempt(out, x, since)
	}
	if len(s.Attempts) == 0 {
		fmt.Fprintln(out, "\n(no attempts)")
	}

	fmt.Fprintf(out, "\noffers: %d\n", s.OffersTotal)
	if hidden := s.OffersTotal - int64(len(s.Offers)); hidden > 0 {
		fmt.Fprintf(out, "… %d more (earlier) not shown; raise --offers\n", hidden)
	}
	if len(s.Offers) > 0 {
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "OFFERED AT\tATTEMPT\tWORKER\tSESSION\tSTATE\tANSWERED AT\tEXPIRES AT")
		for _, o := range s.Offers {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", utc(&o.OfferedAtMs), o.AttemptNo, o.Worker, o.SessionID, o.State,
				utc(o.AnsweredAtMs), utc(&o.ExpiresAtMs))
		}
		tw.Flush()
	}

	fmt.Fprintf(out, "\ntimeline: %d events\n", s.EventsTotal)
	if hidden := s.EventsTotal - int64(len(s.Events)); hidden > 0 {
		fmt.Fprintf(out, "… %d more (seq 1 … %d) not shown; raise --events\n", hidden, hidden)
	}
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tAT\tAFTER ADMISSION\tEVENT\tDETAIL")
	for _, e := range s.Events {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", e.Seq, utc(&e.AtMs), since(e.AtMs), e.Type, printable(string(e.Detail)))
	}
	tw.Flush()
}

func printStoryAttempt(out io.Writer, x admin.StoryAttempt, since func(int64) string) {
	head := fmt.Sprintf("attempt %d  %s", x.AttemptNo, x.State)
	if x.WorkerID != nil {
		head += "  on " + *x.WorkerID
		if x.TokenName != nil {
			head += " (token " + *x.TokenName + ")"
		}
	}
	fmt.Fprintln(out, head)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "  %s\t%s\n", k, v) }
	row("attempt id", x.AttemptID.String())
	if x.WorkerSessionID != nil {
		sess := x.WorkerSessionID.String()
		if x.SessionState != nil {
			sess += " (" + *x.SessionState + ", its last heartbeat " + utc(x.SessionHeartbeatAtMs) + ")"
		}
		row("session", sess)
	}
	if x.OfferID != nil {
		row("offer", x.OfferID.String())
	}
	if l := x.Lease; l != nil {
		v := fmt.Sprintf("version %d, %s: granted %s, expires %s", l.LeaseVersion, l.State, utc(&l.GrantedAtMs), utc(&l.ExpiresAtMs))
		if l.EndedAtMs != nil {
			v += ", ended " + utc(l.EndedAtMs)
		}
		row("lease", v)
	}
	created := utc(&x.CreatedAtMs) + " " + paren(since(x.CreatedAtMs))
	row("created", created)
	if x.StartedAtMs != nil {
		row("started", utc(x.StartedAtMs)+" "+paren(since(*x.StartedAtMs)))
	}
	if x.FinishedAtMs != nil {
		f := utc(x.FinishedAtMs) + " " + paren(since(*x.FinishedAtMs))
		if x.StartedAtMs != nil {
			f += fmt.Sprintf(", %s after its start", strings.TrimLeft(msFixed(*x.FinishedAtMs-*x.StartedAtMs, ""), " "))
		}
		row("finished", f)
	}
	if r := x.Result; r != nil {
		exit := "-"
		switch {
		case r.ExitCode != nil:
			exit = fmt.Sprintf("status %d", *r.ExitCode)
		case r.Signal != "":
			exit = "signal " + printable(r.Signal)
		}
		row("outcome", fmt.Sprintf("%s, exit %s, ran %s (worker's measure)", r.Outcome, exit, strings.TrimLeft(msFixed(r.DurationMs, ""), " ")))
	}
	if e := x.Error; e != nil {
		parts := []string{}
		for _, p := range []string{e.Kind, e.Message, e.Reason} {
			if p != "" {
				parts = append(parts, printable(p))
			}
		}
		row("error", strings.Join(parts, ": "))
	}
	tw.Flush()
	if r := x.Result; r != nil {
		what := fmt.Sprintf("%d bytes", len(r.OutputTail))
		if r.OutputTruncated {
			what = fmt.Sprintf("its last %d bytes", len(r.OutputTail))
		}
		if r.OutputTail == "" {
			fmt.Fprintln(out, "  output         (none)")
			return
		}
		fmt.Fprintf(out, "  output (%s):\n", what)
		for _, line := range strings.Split(strings.TrimSuffix(r.OutputTail, "\n"), "\n") {
			fmt.Fprintf(out, "    │ %s\n", printable(line))
		}
	}
}

// printable keeps a terminal safe from what a job printed: control characters (escape
// sequences, carriage returns) are shown as U+FFFD, tabs kept.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		if r != '\t' && unicode.IsControl(r) {
			return '\uFFFD'
		}
		return r
	}, s)
}
