// Command qldemo runs the whole scheduler stack on a throwaway PostgreSQL (or a given server),
// shows it admitting, and removes what it started. It is a binary of its own so that qlsched, the
// production binary, links nothing that spawns initdb. See `qldemo --help`.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
	_ "time/tzdata" // every binary resolves zones identically, also in minimal containers

	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/internal/app/cli"
	"github.com/qlcontrol/controlcore/internal/app/demo"
	"github.com/qlcontrol/controlcore/internal/app/verify"
	"github.com/qlcontrol/controlcore/internal/base/buildinfo"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/worker/process"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == process.SupervisorCommand {
		os.Exit(process.Supervise(os.Args[2:])) // the workers' per-job supervisor, as qlworker's
	}
	hangUpIsInterrupt()
	a := &app{}
	os.Exit(cli.Run(a.rootCmd(), os.Args[1:], os.Stderr, a.redact))
}

// hangUpIsInterrupt makes a SIGHUP (the terminal closed, the ssh session dropped) an interrupt:
// its default action would end the demo at once and leave its throwaway data directory (or its
// database on a given server) behind; as an interrupt, the demo removes what it started.
func hangUpIsInterrupt() {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			_ = syscall.Kill(os.Getpid(), syscall.SIGINT)
		}
	}()
}

// app holds the global flags.
type app struct {
	databaseURL string
	format      cli.Format

	conn *dbconn.Config
}

func (a *app) redact(s string) string {
	if a.conn == nil {
		return s
	}
	return a.conn.Redact(s)
}

func (a *app) rootCmd() *cobra.Command {
	opts := demo.Options{Replicas: 2, Duration: 20 * time.Second}
	root := &cobra.Command{
		Use:   "qldemo [--replicas 2] [--duration 20s] [--database-url URL]",
		Short: "Run the whole closed loop on an embedded throwaway PostgreSQL, then remove it",
		Long: `qldemo starts a throwaway PostgreSQL from this machine's server binaries (QL_PG_BIN,
pg_config or /usr/lib/postgresql/*/bin), creates the four roles, applies the migration stream as
the owner role, verifies it (checksums, capability, readiness, exact privileges), publishes a
project, three tasks and a few cron triggers and creates a worker token as the admin role, and
runs --replicas scheduler replicas for --duration, each started as qlsched run starts one (its
own pool as the runtime role, readiness, startup recovery, then the rounds), with a progress
line a second.

Beside them it runs the rest of the closed loop, in-process: one dispatcher, started as qlsched
dispatch starts one (runtime role, readiness, the worker protocol on a loopback port of its
own), and two workers built as qlworker builds one (2 slots each, every job in a process group
of its own under qldemo's supervisor). They run the Runs' commands: hello (sh -c "echo hello")
succeeds; flaky (false) exits 1, is retried once after 500ms and fails; the one sleeper Run
(sleep 60, published a few seconds in) is cancelled while it runs, through the admin path of
qlsched runs cancel. After --duration the replicas stop and the demo waits (at most 15s) for
the admitted Runs to finish; a Run still live then fails the execution audit (exit 1).

It then prints the admitted runs, the exactly-once audit, the Runs per task and state (the
retried-and-failed Run with its 2 attempts, the cancelled one) and the execution audit (the
closed loop's invariants: leases, attempts, events), and stops and removes everything it
started, worker jobs included, also on Ctrl-C.

With --database-url (the flag only: QL_DATABASE_URL or PG* variables alone never send the demo
to a server, so a shell set up for production does not run it there) it uses that server
instead, connected as a superuser: it
creates a database of its own there (qlsched_demo_<time>), creates the four roles if missing
(roles are server-wide and stay), does each role's work by acting as that role, and drops its
database at the end.

The output is plain lines, one per step or second (no carriage returns, so a log keeps them
apart), and ends with the next steps: the README's commands for a real database. qldemo prints no
JSON document: --format json is refused (exit 2) before anything starts.

Exit codes: 0 success, 1 the server is unfit or the stack misbehaved, 2 bad usage (nothing was
started), 3 cannot connect or the database failed, 130 interrupted (what it started is removed).`,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if a.format != "text" {
				return cli.Usagef("--format %s: qldemo prints progress lines for a reader, no document; run it without --format", a.format)
			}
			if opts.Replicas < 1 || opts.Replicas > demo.MaxReplicas {
				return cli.Usagef("--replicas %d: want 1 … %d", opts.Replicas, demo.MaxReplicas)
			}
			if opts.Duration < demo.MinDuration || opts.Duration > demo.MaxDuration {
				return cli.Usagef("--duration %s: want %s … %s", opts.Duration, demo.MinDuration, demo.MaxDuration)
			}
			// an empty flag would fall back to QL_DATABASE_URL and PG*, which the demo never uses
			if f := cmd.Flag("database-url"); f.Changed && f.Value.String() == "" {
				return cli.Usagef("--database-url is empty: give the URL of a server to run the demo on, or leave the flag out")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Out = cmd.OutOrStdout()
			opts.Supervisor = supervisor
			if cmd.Flag("database-url").Changed {
				var err error
				if a.conn, err = dbconn.Resolve(a.databaseURL); err != nil {
					return err
				}
				opts.Server = a.conn
			}
			return demoErr(demo.Run(cmd.Context(), opts))
		},
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	cli.AddVersion(root, buildinfo.Read())
	pf := root.PersistentFlags()
	// only the flag: QL_DATABASE_URL and PG* never send the demo to a server (--help says why)
	pf.StringVar(&a.databaseURL, "database-url", "", "PostgreSQL URL of a server to run on, as a superuser (default: a throwaway server of its own)")
	cli.FormatVar(pf, &a.format)
	f := root.Flags()
	f.IntVar(&opts.Replicas, "replicas", opts.Replicas, fmt.Sprintf("scheduler replicas to run (1 … %d)", demo.MaxReplicas))
	f.DurationVar(&opts.Duration, "duration", opts.Duration, fmt.Sprintf("how long the replicas run (%s … %s)", demo.MinDuration, demo.MaxDuration))
	return root
}

// supervisor re-executes this binary as the workers' per-job supervisor (qlworker's): a job and
// its descendants die with the demo, even when it is killed.
var supervisor = []string{"/proc/self/exe", process.SupervisorCommand}

// demoErr maps what the demo found onto the exit-code contract: a problem (exit 1) when the
// server is unfit or the stack misbehaved; connection and database errors keep their own codes.
func demoErr(err error) error {
	var notReady *verify.NotReadyError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, demo.ErrNotSuperuser), errors.Is(err, demo.ErrDrift), errors.Is(err, demo.ErrNotExactOnce),
		errors.Is(err, demo.ErrLoopAudit), errors.As(err, &notReady):
		return &cli.ProblemError{Err: err}
	}
	return err // a connection or database error: exit 3
}
