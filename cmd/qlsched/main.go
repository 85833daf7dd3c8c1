// Command qlsched runs the ADR-0105 row-lease cron scheduler (one replica per process) and its
// admin commands. See `qlsched --help`.
package main

import (
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
		Use:   "qlsched",
		Short: "PostgreSQL row-lease cron scheduler with atomic Run admission (ADR-0105)",
		Long: `qlsched turns due cron occurrences into durable Runs, exactly once, on any number of replicas
sharing one PostgreSQL database: each replica claims schedule rows under a four-part lease fence
and admits each occurrence in one SERIALIZABLE transaction.

Connection: --database-url, else QL_DATABASE_URL, else the standard PG* variables, used only
when one of PGHOST, PGHOSTADDR, PGPORT, PGUSER, PGDATABASE or PGSERVICE is set: with none of
these given, a command that needs the database stops (exit 2) instead of trying libpq's defaults.
Passwords never appear in output or logs.

Exit codes: 0 success, 1 a check found a problem, 2 bad usage or configuration (nothing was
opened), 3 cannot connect or the database failed.`,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error { return a.validate() },
		// cobra's generated completion command would run the root's hook, which reads the
		// connection settings: a command that never connects must not depend on them.
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.AddCommand(a.applyCmd()) // schedules as code (apply.go)
	cli.AddVersion(root, buildinfo.Read())
	pf := root.PersistentFlags()
	pf.StringVar(&a.databaseURL, "database-url", "", "PostgreSQL URL (default: $QL_DATABASE_URL, then PG* variables)")
	cli.FormatVar(pf, &a.format)
	pf.StringVar(&a.logFormat, "log-format", "text", "log format on stderr: text (terminals) or json (collectors)")
	pf.StringVar(&a.logLevelStr, "log-level", "info", "log level: debug, info, warn or error")
	root.AddCommand(a.runCmd(), a.statusCmd(), a.projectCmd(), a.taskCmd(), a.triggerCmd(), a.runsWithCancel(), a.uiCmd())
	// worker tokens and sessions (workers.go)
	root.AddCommand(a.workerCmd(), a.workersCmd(), a.replicasCmd())
	root.AddCommand(a.dispatchCmd())     // a dispatcher replica (dispatch.go)
	cli.Explain(root, dbconn.PoolerHint) // a transaction pooler the URL does not name, or names as session pooling
	return root
}
