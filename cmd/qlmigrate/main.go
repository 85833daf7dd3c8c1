// Command qlmigrate applies, audits and verifies the control-core migration stream: the tool CI
// pipelines and DBAs run. See `qlmigrate --help`.
package main

import (
	"fmt"
	"os"
	_ "time/tzdata" // every binary resolves zones identically, also in minimal containers

	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/internal/app/cli"
	"github.com/qlcontrol/controlcore/internal/base/buildinfo"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
)

func main() {
	a := &app{}
	os.Exit(cli.Run(a.rootCmd(), os.Args[1:], os.Stderr, a.redact))
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "qlmigrate",
		Short: "Apply, audit and verify the control-core PostgreSQL migration stream",
		Long: `qlmigrate applies the hand-written control-core migrations pg-0001 … pg-0029 (embedded in
this binary) and checks a database against them.

Connection: --database-url, else QL_DATABASE_URL, else the standard PG* variables, used only
when one of PGHOST, PGHOSTADDR, PGPORT, PGUSER, PGDATABASE or PGSERVICE is set: with none of
these given, a command that needs the database stops (exit 2) instead of trying libpq's defaults.
Passwords never appear in output. Behind a transaction-pooling PgBouncer add ql_pooler=transaction
to the URL (qlmigrate also detects PgBouncer when it refuses a startup parameter).

Exit codes: 0 success, 1 a check found a problem, 2 bad usage or configuration (nothing was
opened), 3 cannot connect or the database failed. --format json documents: docs/json.md.`,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.validateFlags(); err != nil {
				return err
			}
			// Only a command that connects reads the connection settings: a bad QL_DATABASE_URL
			// must not break help or hash.
			if cmd.Annotations[connectsAnnotation] == "" {
				return nil
			}
			if err := a.resolveConn(); err != nil {
				return err
			}
			// who holds a lock or runs a statement is then visible in pg_stat_activity
			host, _ := os.Hostname()
			a.conn.SetApplicationName(fmt.Sprintf("%s (%s pid %d)", cmd.CommandPath(), host, os.Getpid()))
			return nil
		},
		// no generated completion command: qlmigrate has no use for one
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	cli.AddVersion(root, buildinfo.Read())
	pf := root.PersistentFlags()
	pf.StringVar(&a.databaseURL, "database-url", "", "PostgreSQL URL (default: $QL_DATABASE_URL, then PG* variables)")
	pf.StringVar(&a.rolePrefix, "role-prefix", "ql_", "prefix of the four role names: <prefix>owner, <prefix>admin, <prefix>runtime, <prefix>worker_ingress")
	cli.FormatVar(pf, &a.format)
	root.AddCommand(connects(a.upCmd()), connects(a.statusCmd()), connects(a.acceptCmd()), connects(a.probeCmd()), a.rolesCmd(),
		connects(a.verifyCmd()), connects(a.grantsCmd()), a.hashCmd())
	cli.Explain(root, dbconn.PoolerHint)
	mapFieldErrors(root)
	return root
}

// connectsAnnotation marks a command that opens a connection (connects).
const connectsAnnotation = "qlmigrate/connects"

// connects marks cmd as one that opens a connection: the root's hook resolves the connection
// settings (--database-url, QL_DATABASE_URL, PG*) for it, and for no other command (help, hash).
func connects(cmd *cobra.Command) *cobra.Command {
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[connectsAnnotation] = "true"
	return cmd
}

// mapFieldErrors makes every command's *migrate.FieldError a usage error naming its flag.
func mapFieldErrors(cmd *cobra.Command) {
	if pre := cmd.PreRunE; pre != nil {
		cmd.PreRunE = func(c *cobra.Command, args []string) error { return flagError(pre(c, args)) }
	}
	if run := cmd.RunE; run != nil {
		cmd.RunE = func(c *cobra.Command, args []string) error { return flagError(run(c, args)) }
	}
	for _, sub := range cmd.Commands() {
		mapFieldErrors(sub)
	}
}
