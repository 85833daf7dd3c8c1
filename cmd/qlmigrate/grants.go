package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/internal/app/cli"
	"github.com/qlcontrol/controlcore/roles"
)

func (a *app) grantsCmd() *cobra.Command {
	var (
		printSQL     bool
		allowMembers []string
	)
	cmd := &cobra.Command{
		Use:   "grants [--sql] [--allow-member ROLE]...",
		Short: "Expected vs actual privileges per role and object; --sql prints the fix",
		Long: `grants audits privileges for a DBA: a matrix of roles × objects × privileges, the model of
roles/model.go (EXPECTED) beside the catalogs (ACTUAL), with DRIFT marking every difference
(+PRIV: held but not modelled, -PRIV: modelled but missing). It covers the database, schema
control_core and every table, sequence, function and type in it (all four roles and PUBLIC on
each), column privileges, default privileges, role attributes (CONNECTION LIMIT and VALID UNTIL
included), memberships, settings (ALTER ROLE … SET, ALTER ROLE … IN DATABASE … SET for this
database, ALTER DATABASE … SET, ALTER ROLE ALL … SET: the model has none) and large objects
(the four roles own and hold none). Privileges
ending in "*" carry the grant option; "ALL" is everything an owner holds on its own object on
this server version (PostgreSQL 17 adds MAINTAIN on tables).

grants --sql prints only the statements that remove the drift, in an order that works, and
nothing else (no output: no drift): REVOKE of extra or PUBLIC privileges, GRANT of missing ones,
ALTER … OWNER TO, ALTER ROLE NOSUPERUSER …, REVOKE of a membership, ALTER DEFAULT PRIVILEGES,
column-level REVOKE. Review it, then run it as a superuser, e.g.
  qlmigrate grants --sql | psql -v ON_ERROR_STOP=1 "$SUPERUSER_URL"

A LOGIN role that is a member of one of the four, directly or through other roles, and may use
it (inherit or SET ROLE) is drift: whoever logs in as it acts as that role. --allow-member ROLE
(repeatable) allows one by name; it is then a note saying so. Other memberships in the four
roles (a superuser's; since PostgreSQL 16 the ADMIN-only one of the CREATEROLE role that created
them; a NOLOGIN group's) are notes. So is what the four roles may do in the cluster's other
databases (CONNECT, TEMPORARY), with the REVOKE that removes it; --sql prints no note's fix.

It only reads. Exit codes: 0 no drift, 1 drift, 2 bad usage, 3 cannot connect.`,
		Example: `  qlmigrate grants --database-url postgres://postgres@db.internal/control
  qlmigrate grants --sql > fix.sql`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkAllowMembers(allowMembers); err != nil {
				return err
			}
			ctx := cmd.Context()
			conn, err := a.conn.Connect(ctx)
			if err != nil {
				return err
			}
			defer conn.Close(ctx)
			audit, err := roles.ReadAudit(ctx, conn, a.names, roles.AuditOptions{AllowedMembers: allowMembers})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch {
			case printSQL && a.json():
				stmts := audit.SQL()
				if stmts == nil {
					stmts = []string{}
				}
				err = writeJSON(out, struct {
					Schema string   `json:"schema"`
					SQL    []string `json:"sql"`
				}{schemaGrantsSQL, stmts})
			case printSQL:
				for _, s := range audit.SQL() {
					fmt.Fprintln(out, s)
				}
			case a.json():
				err = writeJSON(out, struct {
					Schema string `json:"schema"`
					*roles.Audit
					OK  bool     `json:"ok"`
					SQL []string `json:"sql"`
				}{schemaGrants, audit, audit.OK(), append([]string{}, audit.SQL()...)})
			default:
				err = writeMatrix(out, audit)
			}
			if err != nil {
				return err
			}
			if !audit.OK() {
				return cli.Problemf("%d privilege drift finding(s)", len(audit.Drift))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&printSQL, "sql", false, "print only the GRANT/REVOKE/ALTER statements that remove the drift")
	addAllowMemberFlag(cmd, &allowMembers)
	return cmd
}

func addAllowMemberFlag(cmd *cobra.Command, into *[]string) {
	cmd.Flags().StringArrayVar(into, strings.TrimPrefix(roles.AllowMemberFlag, "--"), nil,
		"a LOGIN role that may be a member, directly or not, of the four roles (repeatable): a note instead of drift")
}

// checkAllowMembers refuses names no role can have, before any connection is opened.
func checkAllowMembers(names []string) error {
	for _, n := range names {
		if n == "" || len(n) > 63 || strings.ContainsRune(n, 0) {
			return cli.Usagef("%s %q: want a role name of 1 to 63 bytes", roles.AllowMemberFlag, n)
		}
	}
	return nil
}

func writeMatrix(w io.Writer, a *roles.Audit) error {
	titles := map[string]string{
		"attribute":    "Role attributes",
		"membership":   "Role memberships",
		"object":       "Object privileges (owner: ALL = every privilege of an owner; * = with grant option)",
		"column":       "Column privileges (the model has none)",
		"default":      "Default privileges (ALTER DEFAULT PRIVILEGES)",
		"setting":      "Settings (ALTER ROLE/DATABASE … SET; the model has none)",
		"large_object": "Large objects of the four roles (the model has none)",
	}
	fmt.Fprintf(w, "grants on database %s (owner %s), PostgreSQL %s\n", a.Database, a.DatabaseOwner, a.ServerVersion)
	for _, section := range []string{"attribute", "setting", "membership", "object", "column", "default", "large_object"} {
		var rows []roles.Row
		for _, r := range a.Rows {
			if r.Section == section {
				rows = append(rows, r)
			}
		}
		fmt.Fprintf(w, "\n== %s\n", titles[section])
		if len(rows) == 0 {
			fmt.Fprintln(w, "(none)")
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "KIND\tOBJECT\tGRANTEE\tEXPECTED\tACTUAL\tDRIFT")
		for _, r := range rows {
			mark := ""
			if r.Drift {
				mark = "DRIFT " + strings.Join(r.Diff, " ")
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Kind, r.Object, r.Grantee, list(r.Expected), list(r.Actual), mark)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(a.Notes) > 0 {
		fmt.Fprintln(w, "\n== Notes (not drift)")
		for _, n := range a.Notes {
			fmt.Fprintf(w, "%s\n", n.Message)
		}
	}
	if a.OK() {
		fmt.Fprintln(w, "\nOK: the privileges match the model exactly")
	} else {
		fmt.Fprintf(w, "\nDRIFT: %d finding(s); `qlmigrate grants --sql` prints the statements that remove them\n", len(a.Drift))
	}
	return nil
}

func list(privs []string) string {
	if len(privs) == 0 {
		return "-"
	}
	return strings.Join(privs, ",")
}
