package main

import (
	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/internal/app/cli"
	"github.com/qlcontrol/controlcore/internal/app/verify"
)

func (a *app) verifyCmd() *cobra.Command {
	var (
		allowPending bool
		fixSQL       bool
		allowMembers []string
	)
	cmd := &cobra.Command{
		Use:   "verify [--allow-pending] [--allow-member ROLE]... [--fix-sql]",
		Short: "Fail closed on any drift: integrity, ledger, versions, capability, readiness, privileges",
		Long: `verify checks a database against the migration stream embedded in this binary and against the
models, and reports every finding grouped by check, naming the object and the fix:

  integrity         the binary's embedded migrations match its embedded migrations.sum
  ledger            every applied migration's checksum-ledger row holds the sha256 of the file in
                    this binary (an edited file is drift) and goose's table agrees with the ledger
  unknown_versions  no version is applied that this binary does not know
  pending           every migration is applied (--allow-pending: pending ones are notes, the
                    capability must match the last applied migration, and readiness and
                    privileges, defined for the complete stream, are skipped)
  capability        control-core is at the capability the last migration sets (v28 / pooled_plan_settings)
  readiness         everything of readiness/readiness_contract.txt exists as written there:
                    tables (persistence, row-level security, replica identity, inheritance),
                    columns (type, nullability, default, collation, identity, generation), keys
                    and CHECKs (deferrable, validated), indexes, triggers and whether they fire
                    (the foreign keys' internal ones included), policies, rules, functions (body,
                    volatility, security, settings, owner, strictness); no event trigger in the
                    database; an extra object that changes what a statement does is drift (a NOT
                    NULL or defaulted column, a constraint, a unique or expression index, a
                    trigger, policy or rule), an inert one a note
  privileges        the catalogs hold exactly the privilege model of roles/model.go: database,
                    schema, table, sequence, function and column ACLs, default privileges,
                    ownership, role attributes (CONNECTION LIMIT and VALID UNTIL included) and
                    memberships (missing and extra are both drift); settings stored for the four
                    roles, for this database or for every role (ALTER ROLE/DATABASE … SET); LOGIN
                    roles that are members of the four, directly or not (--allow-member ROLE
                    makes one a note); large objects owned by or granted to the four. What the
                    four may do in the cluster's other databases (CONNECT, TEMPORARY) are notes.

It only reads, in one read-only transaction. Connect as the owner role or a superuser (goose's
version table and the ledger are the owner's).

--fix-sql prints, instead of the report, one script that removes every drift finding that has a
safe fix, in one transaction (BEGIN … COMMIT), to review and run as a superuser; findings with no
safe statement (lost data, an edited migration) are listed at its end as comments. verify never
runs it. "qlmigrate grants --sql" prints the privilege statements alone.

Exit codes: 0 no drift, 1 drift, 2 bad usage, 3 cannot connect or the database failed.
--format json prints the report described in docs/verify-json.md (schema qlmigrate.verify/v1).`,
		Example: `  qlmigrate verify --database-url postgres://ql_owner@db.internal/control
  qlmigrate verify --allow-pending --format json
  qlmigrate verify --fix-sql > fix.sql && psql -v ON_ERROR_STOP=1 -f fix.sql "$SUPERUSER_URL"`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkAllowMembers(allowMembers); err != nil {
				return err
			}
			if fixSQL && a.json() {
				// a script is not a JSON document: the findings' statements are in the report's sql fields
				return cli.Usagef("--fix-sql prints a SQL script, not a document: leave out --format json (the JSON report holds each finding's sql)")
			}
			ctx := cmd.Context()
			conn, err := a.conn.Connect(ctx)
			if err != nil {
				return err
			}
			defer conn.Close(ctx)
			report, err := verify.Run(ctx, conn, verify.Options{Names: a.names, AllowPending: allowPending, AllowMembers: allowMembers})
			if err != nil {
				return err
			}
			report.Target = a.conn.Describe()
			out := cmd.OutOrStdout()
			switch {
			case fixSQL:
				err = verify.WriteFixSQL(out, report)
			case a.json():
				err = writeJSON(out, report)
			default:
				err = verify.WriteText(out, report)
			}
			if err != nil {
				return err
			}
			if !report.OK {
				return cli.Problemf("%d drift finding(s)", report.Summary.Drift)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&allowPending, "allow-pending", false, "report pending migrations as notes instead of drift (a rollout in progress)")
	cmd.Flags().BoolVar(&fixSQL, "fix-sql", false, "print one script (one transaction) that removes the drift, instead of the report; verify never runs it")
	addAllowMemberFlag(cmd, &allowMembers)
	return cmd
}
