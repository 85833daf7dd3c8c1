package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/app/cli"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
)

func (a *app) applyCmd() *cobra.Command {
	var (
		file         string
		check, prune bool
		schedules    *admin.Schedules
	)
	cmd := &cobra.Command{
		Use:   "apply -f FILE [--check] [--prune]",
		Short: "Make the database hold the projects, tasks and triggers a schedules file declares",
		Long: `apply reads a schedules file (YAML, or JSON; "-" is standard input) of projects, tasks and
triggers and validates all of it before connecting: every fault is reported as
FILE:LINE: FIELD: PROBLEM and apply exits 2 without opening a connection. Unknown fields are faults.

It then compares the file with the database and prints the plan: per project, task and trigger
create, update (with the fields that change), unchanged, and with --prune disable. An executor spec
is never printed, only the sha256 of its canonical form.

--check prints the plan and writes nothing: exit 0 when the database equals the file, 1 when it
differs (for CI drift detection). It reads in one read-only transaction, as the admin role.

Without --check the plan runs in one admin transaction (all of it or nothing), under the audited
lock of each project it changes: only items that differ get a new revision, each with its audit
row; an unchanged trigger keeps its schedule row, cursor and claim; a changed one is reset as by
trigger publish. A trigger pins its task's head revision: when a task's executor spec changes,
the triggers of that task are republished to pin the new revision.

--prune disables (a new revision with enabled false) the triggers of the file's projects that the
file does not list; without it they are left as they are and shown as unlisted. Projects and
tasks are never removed. The file's format is in the README ("Schedules as code") and
examples/schedules.yaml.`,
		Example: `  qlsched apply -f examples/schedules.yaml --check
  qlsched apply -f examples/schedules.yaml --prune`,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return cli.Usagef("-f/--file is required: the schedules file to apply")
			}
			data, name, err := readSchedules(cmd.Context(), file)
			if err != nil {
				return err
			}
			if schedules, err = admin.ParseSchedules(name, data); err != nil {
				var fe *admin.SchedulesError
				if errors.As(err, &fe) {
					for _, e := range fe.Errors {
						fmt.Fprintln(cmd.ErrOrStderr(), e)
					}
					return cli.Usagef("%s: %d error(s); nothing was sent to the database", name, len(fe.Errors))
				}
				return &cli.UsageError{Err: err}
			}
			_, err = a.connConfig()
			return err
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.roleHint(cmd, a.withDB(cmd.Context(), func(pool *dbconn.DB) error {
				opts := admin.ApplyOptions{Prune: prune}
				var (
					plan admin.Plan
					err  error
				)
				if check {
					plan, err = admin.NewReader(pool).Plan(cmd.Context(), schedules, opts)
				} else {
					plan, err = admin.NewPublisher(pool).Apply(cmd.Context(), schedules, opts)
				}
				if err := adminErr(err); err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				if err := a.output(out, plan, func() { printPlan(out, plan, check) }); err != nil {
					return err
				}
				// the command that applies exactly the plan shown: --prune disables what it listed
				// to disable, and without it nothing would be; the file one shell word, to paste
				again := "qlsched apply -f " + shellQuote(file)
				if prune {
					again += " --prune"
				}
				if check && !plan.InSync {
					return cli.Problemf("the database differs from %s (%s applies the plan)", plan.File, again)
				}
				return nil
			}))
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&file, "file", "f", "", "the schedules file (YAML or JSON; - reads standard input)")
	fl.BoolVar(&check, "check", false, "print the plan, write nothing; exit 1 when the database differs from the file")
	fl.BoolVar(&prune, "prune", false, "disable the triggers of the file's projects that the file does not list")
	return cmd
}

// readSchedules reads the file (or standard input for "-"), bounded, until ctx is cancelled; a
// file that cannot be read is bad usage.
func readSchedules(ctx context.Context, file string) ([]byte, string, error) {
	r, name := io.Reader(os.Stdin), "stdin"
	if file != "-" {
		// opening a FIFO blocks until a writer comes, past Ctrl-C; a device may never end
		if st, err := os.Stat(file); err == nil && !st.Mode().IsRegular() {
			kind := "a device or socket"
			switch {
			case st.IsDir():
				kind = "a directory"
			case st.Mode()&os.ModeNamedPipe != 0:
				kind = "a named pipe"
			}
			return nil, file, cli.Usagef("-f %q: not a regular file but %s; for a pipe use -f -", file, kind)
		}
		f, err := os.Open(file)
		if err != nil {
			return nil, file, cli.Usagef("-f %q: %v", file, errors.Unwrap(err))
		}
		defer f.Close()
		r, name = f, file
	}
	// the read takes no context: it runs on its own, so Ctrl-C stops apply even while a pipe or a
	// terminal on standard input stays open
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		data, err := io.ReadAll(io.LimitReader(r, admin.MaxSchedulesFile+1))
		done <- result{data, err}
	}()
	select {
	case <-ctx.Done():
		return nil, name, ctx.Err()
	case res := <-done:
		if res.err != nil {
			return nil, name, cli.Usagef("read %q: %v", name, res.err)
		}
		return res.data, name, nil
	}
}

// printPlan writes the plan as a table and a summary line.
func printPlan(w io.Writer, plan admin.Plan, check bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tPROJECT\tID\tACTION\tREV\tCHANGES")
	for _, it := range plan.Items {
		rev := "-"
		if it.Revision != 0 {
			rev = fmt.Sprint(it.Revision)
		}
		changes := make([]string, 0, len(it.Changes))
		for _, c := range it.Changes {
			switch {
			case it.Action == admin.ActionCreate:
				changes = append(changes, fmt.Sprintf("%s %s", c.Field, shortValue(c.To)))
			default:
				changes = append(changes, fmt.Sprintf("%s %s → %s", c.Field, shortValue(c.From), shortValue(c.To)))
			}
		}
		detail := strings.Join(changes, "; ")
		switch {
		case it.Action == admin.ActionUnlisted:
			detail = "not in the file: left as it is (--prune disables it)"
		case it.Kind == admin.KindTrigger && it.Line == 0 && it.Action == admin.ActionUpdate:
			// an unlisted trigger whose task the file moves: say so, or it reads as the file's own
			detail = "not in the file: moves with its task: " + detail
		}
		switch {
		case it.Kind == admin.KindProject && it.State == admin.ProjectPaused:
			detail = "state paused (changes are applied; nothing is claimed until project resume)"
		case it.Kind == admin.KindProject && it.State != "" && it.State != admin.ProjectActive:
			detail = "state " + it.State + " (apply changes nothing in a project that is not active or paused)"
		}
		if detail == "" {
			detail = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", it.Kind, it.Project, it.ID, it.Action, rev, detail)
	}
	tw.Flush()
	s := plan.Summary
	counts := fmt.Sprintf("%d to create, %d to update, %d to disable, %d unchanged", s.Create, s.Update, s.Disable, s.Unchanged)
	if s.Unlisted > 0 {
		counts += fmt.Sprintf(", %d unlisted", s.Unlisted)
	}
	switch {
	case plan.InSync:
		fmt.Fprintf(w, "%s: the database equals the file (%s); nothing written\n", plan.File, counts)
	case check:
		fmt.Fprintf(w, "%s: the database differs (%s); nothing written (--check)\n", plan.File, counts)
	default:
		fmt.Fprintf(w, "%s: applied in one transaction (%s)\n", plan.File, strings.NewReplacer("to create", "created", "to update", "updated", "to disable", "disabled").Replace(counts))
	}
	if s.Unlisted > 0 && !plan.Prune {
		fmt.Fprintf(w, "%s not in the file: left as they are; apply with --prune disables the enabled ones\n", triggersCount(s.Unlisted))
	}
	if n := plan.QueuedForInitialisation; n > 0 && !plan.InSync {
		verb := "queued"
		if check {
			verb = "to be queued"
		}
		fmt.Fprintf(w, "%s %s for initialisation: the replicas give each its first cursor, in batches (docs/operations.md, \"A mass publish: initialisation\")\n",
			triggersCount(n), verb)
	}
}

// triggersCount is "1 trigger" or "12,000 triggers".
func triggersCount(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if n == 1 {
		return s + " trigger"
	}
	return s + " triggers"
}

// shortValue shortens a digest ("sha256:" and 64 hex digits) to 12 digits and quotes values that
// hold spaces (cron specs); "" is "-".
func shortValue(v string) string {
	switch {
	case v == "":
		return "-"
	case strings.HasPrefix(v, "sha256:") && len(v) == len("sha256:")+64:
		return v[:len("sha256:")+12]
	case strings.ContainsAny(v, " \t"):
		return fmt.Sprintf("%q", v)
	}
	return v
}
