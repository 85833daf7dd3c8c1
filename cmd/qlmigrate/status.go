package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/internal/app/cli"
	"github.com/qlcontrol/controlcore/internal/app/verify"
	"github.com/qlcontrol/controlcore/internal/base/sqlfile"
)

func (a *app) statusCmd() *cobra.Command {
	var exitCode bool
	cmd := &cobra.Command{
		Use:   "status [--exit-code]",
		Short: "List every migration: version, name, applied at, by whom, how long, checksum state",
		Long: `status lists every migration embedded in this binary with the time it was applied (or
"pending"), the session user that applied it, how long its statements took, and the state of its
checksum-ledger row: ok, changed (statements) (a statement of the file differs from what ran),
changed (comments/whitespace only) (qlmigrate accept can record it), missing (applied without a
ledger row) or - (not applied). It reads in one read-only transaction, takes no lock and changes
nothing.

Below the table it lists every finding up would refuse on, from up's own validation run in the
same snapshot; among them a version applied that this binary does not know and a renamed
migration, which no line of the table shows.

--exit-code: exit 1 while any migration is pending, any applied one is changed or missing, or up
would refuse (a CI gate); without it status exits 0 whatever it shows.`,
		Example: `  qlmigrate status --exit-code || echo "migrations pending or changed"`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			r, err := a.openRunner(ctx, false)
			if err != nil {
				return err
			}
			defer r.Close()
			st, err := r.Status(ctx)
			if err != nil {
				return err
			}
			capability, capErr := r.Capability(ctx)
			rows, pending, bad, drift := st.Migrations, st.Pending(), st.Changed(), st.Drift()
			out := cmd.OutOrStdout()
			if a.json() {
				type item struct {
					Version    int64      `json:"version"`
					Name       string     `json:"name"`
					File       string     `json:"file"`
					Applied    bool       `json:"applied"`
					AppliedAt  *time.Time `json:"applied_at,omitempty"`
					AppliedBy  string     `json:"applied_by,omitempty"`
					DurationMs *int64     `json:"duration_ms,omitempty"`
					Checksum   string     `json:"checksum"`
				}
				res := struct {
					Schema     string           `json:"schema"`
					Migrations []item           `json:"migrations"`
					Pending    int              `json:"pending"`
					Changed    int              `json:"changed"`
					Capability *int32           `json:"capability,omitempty"`
					UpRefuses  bool             `json:"up_refuses"`
					Drift      []verify.Finding `json:"drift"`
				}{Schema: schemaStatus, Migrations: []item{}, Pending: pending, Changed: bad, UpRefuses: !st.Validation.OK, Drift: drift}
				if res.Drift == nil {
					res.Drift = []verify.Finding{}
				}
				for _, s := range rows {
					it := item{Version: s.Migration.Version, Name: s.Migration.Name, File: s.Migration.File, Applied: s.Applied, Checksum: string(s.Checksum)}
					if s.Applied {
						at := s.AppliedAt.UTC()
						it.AppliedAt = &at
					}
					if s.AppliedBy != "" {
						ms := s.Duration.Milliseconds()
						it.AppliedBy, it.DurationMs = s.AppliedBy, &ms
					}
					res.Migrations = append(res.Migrations, it)
				}
				if capErr == nil {
					res.Capability = &capability.Version
				}
				if err := writeJSON(out, res); err != nil {
					return err
				}
			} else {
				tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "VERSION\tNAME\tAPPLIED AT\tAPPLIED BY\tDURATION\tCHECKSUM")
				for _, s := range rows {
					at, by, took := "pending", "-", "-"
					if s.Applied {
						at = s.AppliedAt.UTC().Format(time.RFC3339)
					}
					if s.AppliedBy != "" {
						by, took = s.AppliedBy, s.Duration.String()
					}
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", s.Migration.Version, s.Migration.Name, at, by, took, s.Checksum.Text())
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				if capErr == nil {
					fmt.Fprintf(out, "\ncontrol-core capability v%d (%s); %d of %d applied\n", capability.Version, capability.Name, len(rows)-pending, len(rows))
				} else {
					fmt.Fprintf(out, "\ncontrol-core not installed; %d of %d applied\n", len(rows)-pending, len(rows))
				}
				if len(drift) > 0 {
					fmt.Fprintf(out, "up refuses to apply anything: %d drift finding(s) (`qlmigrate verify` reports them with their fixes)\n", len(drift))
					for _, f := range drift {
						fmt.Fprintf(out, "  %s: %s\n", sqlfile.CommentText(f.Object), sqlfile.CommentText(f.Message))
					}
				}
			}
			if exitCode && !st.Current() {
				return cli.Problemf("%d migration(s) pending, %d changed or missing, %d drift finding(s) up refuses on (--exit-code)", pending, bad, len(drift))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&exitCode, "exit-code", false, "exit 1 while a migration is pending, changed or missing, or up would refuse (a CI gate)")
	return cmd
}
