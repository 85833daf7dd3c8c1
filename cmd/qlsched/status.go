package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/db"
)

// maxLastAdmits bounds the admissions listed per project: the newest per trigger, newest first.
const maxLastAdmits = 5

// projectStatus is one project of `qlsched status --format json`: the counts of ProjectStatus
// (backlog as defined in sql/queries/status.sql: what a claim would take now), its live claims by
// owner and its last admissions.
type projectStatus struct {
	db.ProjectStatusRow
	LiveClaimsByOwner []ownerClaims `json:"live_claims_by_owner"`
	LastAdmits        []lastAdmit   `json:"last_admits"`
}

type ownerClaims struct {
	Owner  string `json:"owner"`
	Claims int64  `json:"claims"`
}

type lastAdmit struct {
	TriggerID       string    `json:"trigger_id"`
	TriggerRevision int64     `json:"trigger_revision"`
	ScheduledForMs  int64     `json:"scheduled_for_ms"`
	QueuedAtMs      int64     `json:"queued_at_ms"`
	RunID           uuid.UUID `json:"run_id"`
}

type statusReport struct {
	Projects []projectStatus           `json:"projects"`
	Claims   []db.LiveClaimsByOwnerRow `json:"live_claims_by_owner"`
}

func (a *app) statusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "What the scheduler is doing: backlog, overdue occurrences, live claims, last admits",
		Long: `status shows, per project: triggers and enabled ones, the backlog (the schedule rows a claim
would take now: due or uninitialised, unclaimed, of an active project and an enabled trigger; the
same count as the qlsched_backlog_schedules gauge), the oldest overdue occurrence among them, live
claims by owner, and the last admissions (newest per trigger); then the live claims by owner across
projects (one line per replica holding claims). Any role with SELECT on control_core can run it
(ql_admin, ql_runtime). It changes nothing.`,
		PreRunE: func(*cobra.Command, []string) error { _, err := a.connConfig(); return err },
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withPool(cmd.Context(), func(pool *pgxpool.Pool) error {
				res, err := readStatus(cmd.Context(), db.New(pool))
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				return a.output(out, res, func() { printStatus(out, res) })
			})
		},
	}
}

func readStatus(ctx context.Context, q *db.Queries) (statusReport, error) {
	projects, err := q.ProjectStatus(ctx)
	if err != nil {
		return statusReport{}, fmt.Errorf("read project status: %w", err)
	}
	byProject, err := q.LiveClaimsByProjectOwner(ctx)
	if err != nil {
		return statusReport{}, fmt.Errorf("read live claims by project: %w", err)
	}
	admits, err := q.LastAdmits(ctx)
	if err != nil {
		return statusReport{}, fmt.Errorf("read last admissions: %w", err)
	}
	owners, err := q.LiveClaimsByOwner(ctx)
	if err != nil {
		return statusReport{}, fmt.Errorf("read live claims by owner: %w", err)
	}
	res := statusReport{Projects: make([]projectStatus, 0, len(projects)), Claims: owners}
	index := map[string]int{}
	for i, p := range projects {
		index[p.ProjectID] = i
		// empty, not null, in JSON: a tool reads "no claims" without a special case
		res.Projects = append(res.Projects, projectStatus{ProjectStatusRow: p, LiveClaimsByOwner: []ownerClaims{}, LastAdmits: []lastAdmit{}})
	}
	for _, c := range byProject {
		if i, ok := index[c.ProjectID]; ok {
			res.Projects[i].LiveClaimsByOwner = append(res.Projects[i].LiveClaimsByOwner, ownerClaims{c.Owner, c.Claims})
		}
	}
	for _, r := range admits { // newest first within a project
		if i, ok := index[r.ProjectID]; ok && len(res.Projects[i].LastAdmits) < maxLastAdmits {
			res.Projects[i].LastAdmits = append(res.Projects[i].LastAdmits,
				lastAdmit{r.TriggerID, r.TriggerRevision, r.ScheduledForMs, r.QueuedAtMs, r.RunID})
		}
	}
	return res, nil
}

func printStatus(out io.Writer, res statusReport) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROJECT\tSTATE\tTRIGGERS\tENABLED\tBACKLOG\tOLDEST OVERDUE\tLIVE CLAIMS\tLAST ADMIT")
	for _, p := range res.Projects {
		claims := fmt.Sprint(p.LiveClaims)
		if len(p.LiveClaimsByOwner) > 0 {
			var by []string
			for _, o := range p.LiveClaimsByOwner {
				by = append(by, fmt.Sprintf("%s: %d", o.Owner, o.Claims))
			}
			claims += " (" + strings.Join(by, ", ") + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", p.ProjectID, p.State, p.Triggers, p.Enabled, p.Backlog,
			ago(p.OldestOverdueMs, p.NowMs), claims, ago(p.LastAdmitMs, p.NowMs))
	}
	tw.Flush()

	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OWNER\tLIVE CLAIMS\tSOONEST EXPIRY")
	for _, o := range res.Claims {
		fmt.Fprintf(tw, "%s\t%d\tin %s\n", o.Owner, o.Claims, time.Duration(o.SoonestExpiryInMs)*time.Millisecond)
	}
	if len(res.Claims) == 0 {
		fmt.Fprintln(tw, "(none)\t0\t-")
	}
	tw.Flush()

	fmt.Fprintln(out)
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
		fmt.Fprintln(tw, "(none)\t\t\t\t")
	}
	tw.Flush()
}

// ago renders a database time relative to now; 0 means none.
func ago(ms, nowMs int64) string {
	if ms == 0 {
		return "-"
	}
	return fmt.Sprintf("%s (%s ago)", time.UnixMilli(ms).UTC().Format("15:04:05Z"), (time.Duration(nowMs-ms) * time.Millisecond).Round(time.Millisecond))
}
