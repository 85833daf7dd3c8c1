package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/db"
)

func (a *app) statusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "List every migration: version, name, applied at, checksum state",
		Long: `status lists every migration embedded in this binary with the time it was applied (or
"pending") and the state of its checksum-ledger row: ok, changed (the file differs from what
ran), missing (applied without a ledger row) or - (not applied). It changes nothing.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			r, err := a.openRunner(ctx, false)
			if err != nil {
				return err
			}
			defer r.Close()
			rows, err := r.Status(ctx)
			if err != nil {
				return err
			}
			capability, capErr := db.New(r.Pool).Capability(ctx, "control-core")
			out := cmd.OutOrStdout()
			if a.json() {
				type item struct {
					Version   int64      `json:"version"`
					Name      string     `json:"name"`
					File      string     `json:"file"`
					Applied   bool       `json:"applied"`
					AppliedAt *time.Time `json:"applied_at,omitempty"`
					Checksum  string     `json:"checksum"`
				}
				res := struct {
					Migrations []item `json:"migrations"`
					Capability *int32 `json:"capability,omitempty"`
				}{Migrations: []item{}}
				for _, s := range rows {
					it := item{Version: s.Migration.Version, Name: s.Migration.Name, File: s.Migration.File, Applied: s.Applied, Checksum: string(s.Checksum)}
					if s.Applied {
						at := s.AppliedAt.UTC()
						it.AppliedAt = &at
					}
					res.Migrations = append(res.Migrations, it)
				}
				if capErr == nil {
					res.Capability = &capability.Version
				}
				return writeJSON(out, res)
			}
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VERSION\tNAME\tAPPLIED AT\tCHECKSUM")
			pending := 0
			for _, s := range rows {
				at := "pending"
				if s.Applied {
					at = s.AppliedAt.UTC().Format(time.RFC3339)
				} else {
					pending++
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", s.Migration.Version, s.Migration.Name, at, s.Checksum)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if capErr == nil {
				fmt.Fprintf(out, "\ncontrol-core capability v%d (%s); %d of %d applied\n", capability.Version, capability.Name, len(rows)-pending, len(rows))
			} else {
				fmt.Fprintf(out, "\ncontrol-core not installed; %d of %d applied\n", len(rows)-pending, len(rows))
			}
			return nil
		},
	}
}
