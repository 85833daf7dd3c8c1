package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/cli"
	"github.com/qlcontrol/controlcore/internal/dbconn"
	"github.com/qlcontrol/controlcore/roles"
)

func (a *app) grantsCmd() *cobra.Command {
	var printSQL bool
	cmd := &cobra.Command{
		Use:   "grants [--sql]",
		Short: "Expected vs actual privileges per role and object; --sql prints the fix",
		Long: `grants audits privileges for a DBA: a matrix of roles × objects × privileges, the model of
roles/model.go (EXPECTED) beside the catalogs (ACTUAL), with DRIFT marking every difference
(+PRIV: held but not modelled, -PRIV: modelled but missing). It covers the database, schema
control_core and every table, sequence, function and type in it (all four roles and PUBLIC on
each), column privileges, default privileges, role attributes and memberships. Privileges
ending in "*" carry the grant option; "ALL" is everything an owner holds on its own object on
this server version (PostgreSQL 17 adds MAINTAIN on tables).

grants --sql prints only the statements that remove the drift, in an order that works, and
nothing else (no output: no drift): REVOKE of extra or PUBLIC privileges, GRANT of missing ones,
ALTER … OWNER TO, ALTER ROLE NOSUPERUSER …, REVOKE of a membership, ALTER DEFAULT PRIVILEGES,
column-level REVOKE. Review it, then run it as a superuser, e.g.
  qlmigrate grants --sql | psql -v ON_ERROR_STOP=1 "$SUPERUSER_URL"

Memberships held by other roles in the four roles (a DBA, or since PostgreSQL 16 the
CREATEROLE role that created them) are listed as notes, not drift.

It only reads. Exit codes: 0 no drift, 1 drift, 2 bad usage, 3 cannot connect.`,
		Example: `  qlmigrate grants --database-url postgres://postgres@db.internal/control
  qlmigrate grants --sql > fix.sql`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			conn, err := pgx.ConnectConfig(ctx, a.conn.Pool.ConnConfig)
			if err != nil {
				return &dbconn.ConnectError{Err: a.conn.RedactError(err)}
			}
			defer conn.Close(ctx)
			audit, err := readAudit(ctx, conn, a.names)
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
					SQL []string `json:"sql"`
				}{stmts})
			case printSQL:
				for _, s := range audit.SQL() {
					fmt.Fprintln(out, s)
				}
			case a.json():
				err = writeJSON(out, struct {
					*roles.Audit
					OK  bool     `json:"ok"`
					SQL []string `json:"sql"`
				}{audit, audit.OK(), append([]string{}, audit.SQL()...)})
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
	return cmd
}

// readAudit reads the catalogs in one read-only transaction whose search_path is pg_catalog only.
func readAudit(ctx context.Context, conn *pgx.Conn, names roles.Names) (*roles.Audit, error) {
	var audit *roles.Audit
	err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL search_path = pg_catalog"); err != nil {
			return err
		}
		var err error
		audit, err = roles.Read(ctx, db.New(tx), names)
		return err
	})
	return audit, err
}

func writeMatrix(w io.Writer, a *roles.Audit) error {
	titles := map[string]string{
		"attribute":  "Role attributes",
		"membership": "Role memberships",
		"object":     "Object privileges (owner: ALL = every privilege of an owner; * = with grant option)",
		"column":     "Column privileges (the model has none)",
		"default":    "Default privileges (ALTER DEFAULT PRIVILEGES)",
	}
	fmt.Fprintf(w, "grants on database %s (owner %s), PostgreSQL %s\n", a.Database, a.DatabaseOwner, a.ServerVersion)
	for _, section := range []string{"attribute", "membership", "object", "column", "default"} {
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
