package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/db"
)

func (a *app) statusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "What the scheduler is doing: backlog, overdue occurrences, live claims, last admits",
		Long: `status shows, per project: triggers and enabled ones, the backlog (due and unclaimed), the
oldest overdue occurrence, live claims, and the last admission; then the live claims by owner (one
line per replica holding claims). Any role with SELECT on control_core can run it (ql_admin,
ql_runtime). It changes nothing.`,
		PreRunE: func(*cobra.Command, []string) error { _, err := a.connConfig(); return err },
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withPool(cmd.Context(), func(pool *pgxpool.Pool) error {
				q := db.New(pool)
				projects, err := q.ProjectStatus(cmd.Context())
				if err != nil {
					return err
				}
				owners, err := q.LiveClaimsByOwner(cmd.Context())
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				res := struct {
					Projects []db.ProjectStatusRow     `json:"projects"`
					Claims   []db.LiveClaimsByOwnerRow `json:"live_claims_by_owner"`
				}{projects, owners}
				return a.output(out, res, func() {
					tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "PROJECT\tSTATE\tTRIGGERS\tENABLED\tBACKLOG\tOLDEST OVERDUE\tLIVE CLAIMS\tLAST ADMIT")
					for _, p := range projects {
						fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%d\t%s\n", p.ProjectID, p.State, p.Triggers, p.Enabled, p.Backlog,
							ago(p.OldestOverdueMs, p.NowMs), p.LiveClaims, ago(p.LastAdmitMs, p.NowMs))
					}
					tw.Flush()
					fmt.Fprintln(out)
					tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "OWNER\tLIVE CLAIMS\tSOONEST EXPIRY")
					for _, o := range owners {
						fmt.Fprintf(tw, "%s\t%d\tin %s\n", o.Owner, o.Claims, time.Duration(o.SoonestExpiryInMs)*time.Millisecond)
					}
					if len(owners) == 0 {
						fmt.Fprintln(tw, "(none)\t0\t-")
					}
					tw.Flush()
				})
			})
		},
	}
}

// ago renders a database time relative to now; 0 means none.
func ago(ms, nowMs int64) string {
	if ms == 0 {
		return "-"
	}
	return fmt.Sprintf("%s (%s ago)", time.UnixMilli(ms).UTC().Format("15:04:05Z"), (time.Duration(nowMs-ms) * time.Millisecond).Round(time.Millisecond))
}
