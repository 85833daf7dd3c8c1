package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/internal/app/cli"
	"github.com/qlcontrol/controlcore/roles"
)

func (a *app) rolesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "roles",
		Short: "Bootstrap the four LOGIN roles",
	}
	cmd.AddCommand(connects(&cobra.Command{
		Use:   "create",
		Short: "Create the four LOGIN roles if missing and let the owner role create control_core",
		Long: `roles create, run by a superuser or a CREATEROLE role that owns the database, creates
<prefix>owner, <prefix>admin, <prefix>runtime and <prefix>worker_ingress if they are missing, as
LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS, with no password (set one
with ALTER ROLE … PASSWORD, or use another authentication method).

On the current database it revokes PUBLIC's default CONNECT and TEMPORARY and grants the owner
role CONNECT and CREATE (with grant option, so migration pg-0017 can let the admin and runtime
roles connect).

An existing role is never altered: one with a privileged attribute (or without LOGIN) is reported
with the statement that would fix it, and the command exits 1. Running it again changes nothing.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			conn, err := a.conn.Connect(ctx)
			if err != nil {
				return err
			}
			defer conn.Close(ctx)
			report, err := roles.Create(ctx, conn, a.names)
			if err != nil {
				var notAllowed *roles.NotAllowedError
				if errors.As(err, &notAllowed) {
					return &cli.ProblemError{Err: err}
				}
				return err
			}
			out := cmd.OutOrStdout()
			if a.json() {
				if err := writeJSON(out, struct {
					Schema string `json:"schema"`
					roles.CreateReport
				}{schemaRolesCreate, report}); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(out, "database %s: PUBLIC has no CONNECT/TEMPORARY; %s may CONNECT and CREATE\n", report.Database, a.names.Owner)
				for _, r := range report.Roles {
					fmt.Fprintln(out, r)
				}
			}
			if !report.OK() {
				return cli.Problemf("a role has a privileged attribute; it was left unchanged")
			}
			return nil
		},
	}))
	return cmd
}
