package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/admin"
)

func (a *app) statusCmd() *cobra.Command {
	return a.list("status", "What the scheduler is doing: backlog, overdue occurrences, live claims, last admits",
		`status shows, per project: triggers and enabled ones, the backlog (the schedule rows a claim
would take now: due or uninitialised, unclaimed, of an active project and an enabled trigger; the
same definition as the qlsched_backlog_schedules gauge), the oldest overdue occurrence among them, live
claims by owner, and the last admissions (the newest per trigger among the project's newest
`+fmt.Sprint(admin.LastAdmitsWalk)+` admitted Runs); then the live claims by owner across projects (one line
per replica holding claims). The triggers and enabled counts stop at `+fmt.Sprint(admin.CountCap)+` per project
and the backlog counts among the first `+fmt.Sprint(admin.CountCap)+` rows of the project's due range, oldest first,
so the read costs the same at any number of triggers: "`+fmt.Sprint(admin.CountCap)+`+" means at least, and "?" an
overdue occurrence that may lie beyond those rows. Live claims are exact. Any role with
SELECT on control_core can run it (ql_admin, ql_runtime). It changes nothing, and reads everything
in one snapshot (one REPEATABLE READ READ ONLY transaction), so its parts agree with each other.`,
		func() error { return nil },
		func(cmd *cobra.Command, r *admin.Reader) (document, func(io.Writer), error) {
			res, err := r.Status(cmd.Context())
			if err != nil {
				return document{}, nil, err
			}
			return statusDocument(res), func(out io.Writer) { printStatus(out, res) }, nil
		})
}

// statusProject is one project of qlsched.status/v1 (docs/json.md): the admin package's
// ProjectStatus with the contract's null for a time that is not there (no overdue occurrence,
// no admission yet), never 0.
type statusProject struct {
	ProjectID         string              `json:"project_id"`
	State             string              `json:"state"`
	Triggers          int64               `json:"triggers"`
	Enabled           int64               `json:"enabled"`
	CountsPartial     bool                `json:"counts_partial"`
	Backlog           int64               `json:"backlog"`
	BacklogPartial    bool                `json:"backlog_partial"`
	OldestOverdueMs   *int64              `json:"oldest_overdue_ms"`
	LiveClaims        int64               `json:"live_claims"`
	LastAdmitMs       *int64              `json:"last_admit_ms"`
	NowMs             int64               `json:"now_ms"`
	LiveClaimsByOwner []admin.OwnerClaims `json:"live_claims_by_owner"`
	LastAdmits        []admin.Admit       `json:"last_admits"`
}

// statusDocument is `qlsched status --format json`: qlsched.status/v1.
func statusDocument(res admin.Status) document {
	orNull := func(ms int64) *int64 {
		if ms == 0 {
			return nil
		}
		return &ms
	}
	projects := make([]statusProject, 0, len(res.Projects))
	for _, p := range res.Projects {
		sp := statusProject{ProjectID: p.ProjectID, State: p.State, Triggers: p.Triggers, Enabled: p.Enabled,
			CountsPartial: p.CountsPartial, Backlog: p.Backlog, BacklogPartial: p.BacklogPartial, OldestOverdueMs: orNull(p.OldestOverdueMs), LiveClaims: p.LiveClaims,
			LastAdmitMs: orNull(p.LastAdmitMs), NowMs: p.NowMs,
			LiveClaimsByOwner: p.LiveClaimsByOwner, LastAdmits: p.LastAdmits}
		if sp.LiveClaimsByOwner == nil {
			sp.LiveClaimsByOwner = []admin.OwnerClaims{}
		}
		if sp.LastAdmits == nil {
			sp.LastAdmits = []admin.Admit{}
		}
		projects = append(projects, sp)
	}
	owners := res.LiveClaimsByOwner
	if owners == nil {
		owners = []admin.ReplicaClaims{}
	}
	return document{schema: "qlsched.status/v1", body: struct {
		Projects          []statusProject       `json:"projects"`
		LiveClaimsByOwner []admin.ReplicaClaims `json:"live_claims_by_owner"`
	}{projects, owners}}
}

func printStatus(out io.Writer, res admin.Status) {
	fmt.Fprintln(out, "Projects")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROJECT\tSTATE\tTRIGGERS\tENABLED\tBACKLOG\tOLDEST OVERDUE\tLIVE CLAIMS\tLAST ADMIT")
	for _, p := range res.Projects {
		claims := fmt.Sprint(p.LiveClaims)
		backlog, overdue := fmt.Sprint(p.Backlog), ago(p.OldestOverdueMs, p.NowMs)
		if p.BacklogPartial {
			backlog += "+"
			if p.OldestOverdueMs == 0 { // the walk read no claimable row: one may lie beyond it
				overdue = fmt.Sprintf("? (none in the first %d due rows)", admin.CountCap)
			}
		}
		if len(p.LiveClaimsByOwner) > 0 {
			var by []string
			for _, o := range p.LiveClaimsByOwner {
				by = append(by, fmt.Sprintf("%s: %d", o.Owner, o.Claims))
			}
			claims += " (" + strings.Join(by, ", ") + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ProjectID, p.State, atLeast(p.Triggers, admin.CountCap),
			atLeast(p.Enabled, admin.CountCap), backlog, overdue, claims, ago(p.LastAdmitMs, p.NowMs))
	}
	tw.Flush()

	fmt.Fprintln(out)
	fmt.Fprintln(out, "Live claims by replica, all projects")
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OWNER\tLIVE CLAIMS\tSOONEST EXPIRY")
	for _, o := range res.LiveClaimsByOwner {
		fmt.Fprintf(tw, "%s\t%d\tin %s\n", o.Owner, o.Claims, msFixed(o.SoonestExpiryInMs, ""))
	}
	if len(res.LiveClaimsByOwner) == 0 {
		fmt.Fprintln(tw, "(none)\t0\t-")
	}
	tw.Flush()

	fmt.Fprintln(out)
	fmt.Fprintf(out, "Last admissions (the newest per trigger among each project's newest %d Runs)\n", admin.LastAdmitsWalk)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROJECT\tTRIGGER\tREVISION\tSCHEDULED FOR\tADMITTED")
	none := true
	for _, p := range res.Projects {
		for _, r := range p.LastAdmits {
			none = false
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", p.ProjectID, r.TriggerID, r.TriggerRevision,
				time.UnixMilli(r.ScheduledForMs).UTC().Format(time.RFC3339), ago(r.QueuedAtMs, p.NowMs))
		}
	}
	if none {
		fmt.Fprintln(tw, "(none)")
	}
	tw.Flush()
}

// ago renders a database time relative to now; 0 means none.
func ago(ms, nowMs int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format("15:04:05Z") + " " + paren(msFixed(nowMs-ms, "")+" ago")
}
