package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/cli"
	"github.com/qlcontrol/controlcore/internal/dbconn"
	"github.com/qlcontrol/controlcore/internal/migrate"
	"github.com/qlcontrol/controlcore/internal/pgcluster"
	"github.com/qlcontrol/controlcore/internal/verify"
	"github.com/qlcontrol/controlcore/roles"
	"github.com/qlcontrol/controlcore/schedule"
)

func (a *app) demoCmd() *cobra.Command {
	var (
		replicas int
		duration time.Duration
	)
	cmd := &cobra.Command{
		Use:   "demo [--replicas 2] [--duration 20s] [--database-url URL]",
		Short: "Run the whole stack on an embedded throwaway PostgreSQL, then remove it",
		Long: `demo starts a throwaway PostgreSQL from this machine's server binaries (QL_PG_BIN,
pg_config or /usr/lib/postgresql/*/bin), creates the four roles, applies the migration stream as
the owner role, verifies it (checksums, capability, readiness, exact privileges), publishes a
project, a task and a few cron triggers as the admin role, and runs --replicas scheduler replicas
(each with its own pool, as the runtime role) for --duration with a progress line. It then prints
the admitted runs and the exactly-once audit, and stops and removes everything it started, also
on Ctrl-C.

With --database-url (the flag only: QL_DATABASE_URL or PG* variables alone never send the demo
to a server, so a shell set up for production does not run it there) it uses that server
instead, connected as a superuser: it
creates a database of its own there (qlsched_demo_<time>), creates the four roles if missing
(roles are server-wide and stay), does each role's work by acting as that role, and drops its
database at the end.`,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if replicas < 1 || replicas > 8 {
				return cli.Usagef("--replicas %d: want 1 … 8", replicas)
			}
			if duration < time.Second || duration > 10*time.Minute {
				return cli.Usagef("--duration %s: want 1s … 10m", duration)
			}
			// an empty flag would fall back to QL_DATABASE_URL and PG*, which the demo never uses
			if f := cmd.Flag("database-url"); f != nil && f.Changed && f.Value.String() == "" {
				return cli.Usagef("--database-url is empty: give the URL of a server to run the demo on, or leave the flag out")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			var server *dbconn.Config
			if f := cmd.Flag("database-url"); f != nil && f.Changed {
				var err error
				if server, err = a.connConfig(); err != nil {
					return err
				}
			}
			return runDemo(cmd.Context(), cmd.OutOrStdout(), replicas, duration, server)
		},
	}
	cmd.Flags().IntVar(&replicas, "replicas", 2, "scheduler replicas to run (1 … 8)")
	cmd.Flags().DurationVar(&duration, "duration", 20*time.Second, "how long the replicas run (1s … 10m)")
	return cmd
}

// demoTriggers are the sample triggers: every second, every 2 s catching up once, every 5 s
// skipping after an outage, and a daily one that initialises and waits.
var demoTriggers = []coordinator.TriggerSpec{
	{Trigger: "every-second", Cron: "* * * * * *", TimeZone: "UTC", Misfire: schedule.MisfireSkip},
	{Trigger: "every-2s", Cron: "*/2 * * * * *", TimeZone: "Europe/Berlin", Misfire: schedule.MisfireFireOnce},
	{Trigger: "every-5s", Cron: "*/5 * * * * *", TimeZone: "America/New_York", Misfire: schedule.MisfireSkip},
	{Trigger: "nightly", Cron: "0 3 * * *", TimeZone: "Asia/Tokyo", Misfire: schedule.MisfireFireOnce},
}

// runDemo runs the demo on server (a superuser connection) in a database of its own, or, when
// server is nil, on a throwaway PostgreSQL it starts. Every role's work goes through
// su.For(database, role): the superuser acting as that role.
func runDemo(ctx context.Context, out io.Writer, replicas int, duration time.Duration, server *dbconn.Config) error {
	step := func(format string, args ...any) { fmt.Fprintf(out, "==> "+format+"\n", args...) }
	su, database := server, "control"
	if server == nil {
		step("starting a throwaway PostgreSQL")
		cluster, err := pgcluster.Start(ctx, pgcluster.Options{})
		if err != nil {
			return &dbconn.ConnectError{Err: err}
		}
		defer func() {
			step("stopping PostgreSQL and removing %s", cluster.DataDir())
			_ = cluster.Stop()
		}()
		step("PostgreSQL from %s on 127.0.0.1:%d", cluster.BinDir, cluster.Port)
		su = mustResolve(cluster.URL("postgres", "postgres"))
	} else {
		database = fmt.Sprintf("qlsched_demo_%d", time.Now().UnixMilli())
		step("using the server of --database-url, %s, in a new database %s", server.Describe(), database)
	}

	conn, err := pgx.ConnectConfig(ctx, su.Pool.ConnConfig)
	if err != nil {
		return &dbconn.ConnectError{Err: su.RedactError(err)}
	}
	var superuser bool
	err = conn.QueryRow(ctx, "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user").Scan(&superuser)
	if err == nil && !superuser {
		err = cli.Problemf("%s is not a superuser: the demo creates a database and the four roles", su.Pool.ConnConfig.User)
	}
	if err == nil {
		// template0: a fresh database whatever an administrator put into template1, and no
		// conflict with sessions connected to template1
		_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{database}.Sanitize()+" TEMPLATE template0")
	}
	conn.Close(context.Background())
	if err != nil {
		return su.RedactError(err)
	}
	if server != nil {
		defer func() {
			step("dropping database %s", database)
			drop := "DROP DATABASE IF EXISTS " + pgx.Identifier{database}.Sanitize() + " WITH (FORCE)"
			dropCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := pgx.ConnectConfig(dropCtx, su.Pool.ConnConfig)
			if err == nil {
				_, err = c.Exec(dropCtx, drop)
				c.Close(dropCtx)
			}
			if err != nil {
				fmt.Fprintf(out, "    could not drop it (%v): run %s\n", su.RedactError(err), drop)
			}
		}()
	}

	names, _ := roles.NewNames(roles.DefaultPrefix)
	step("qlmigrate roles create")
	conn, err = pgx.ConnectConfig(ctx, su.For(database, "").Pool.ConnConfig)
	if err != nil {
		return &dbconn.ConnectError{Err: su.RedactError(err)}
	}
	report, err := roles.Create(ctx, conn, names)
	conn.Close(context.Background())
	if err != nil {
		return err
	}
	for _, r := range report.Roles {
		fmt.Fprintf(out, "    %s\n", r)
	}

	step("qlmigrate up (as %s)", names.Owner)
	r, err := migrate.Open(ctx, su.For(database, ""), migrate.Options{Names: names, AsOwner: true})
	if err != nil {
		return err
	}
	applied, err := r.Up(ctx, 0)
	r.Close()
	if err != nil {
		return err
	}
	step("applied %d migrations: pg-0001 … pg-0018, control-core v17", len(applied))

	// What a CI pipeline runs before it trusts the database: checksums, capability, readiness
	// and the exact privileges of the four roles.
	step("qlmigrate verify (as %s)", names.Owner)
	ownerPool, err := su.For(database, names.Owner).Open(ctx)
	if err != nil {
		return err
	}
	verified, err := verify.Run(ctx, ownerPool, verify.Options{Names: names})
	ownerPool.Close()
	if err != nil {
		return err
	}
	for _, c := range verified.Checks {
		fmt.Fprintf(out, "    %-17s %s\n", c.Name, c.Status)
	}
	if !verified.OK {
		return cli.Problemf("verify found %d drift finding(s) on a fresh database", verified.Summary.Drift)
	}

	step("publishing project demo, task hello and %d triggers (as %s)", len(demoTriggers), names.Admin)
	adminPool, err := su.For(database, names.Admin).Open(ctx)
	if err != nil {
		return err
	}
	defer adminPool.Close()
	pub := coordinator.NewPublisher(adminPool)
	if err := pub.CreateProject(ctx, "demo"); err != nil {
		return err
	}
	if _, err := pub.PublishTask(ctx, "demo", "hello", []byte(`{"image":"example/hello:1","args":["--greet","world"]}`)); err != nil {
		return err
	}
	for _, t := range demoTriggers {
		t.Project, t.Task, t.Enabled = "demo", "hello", true
		if _, err := pub.PublishTrigger(ctx, t); err != nil {
			return err
		}
		fmt.Fprintf(out, "    %-14s %-16q %-18s misfire %s\n", t.Trigger, t.Cron, t.TimeZone, t.Misfire)
	}

	step("running %d replicas for %s (as %s, cadence 250ms)", replicas, duration, names.Runtime)
	runCtx, stopRun := context.WithTimeout(ctx, duration)
	defer stopRun()
	var coords []*coordinator.Coordinator
	var lifecycles []*coordinator.Lifecycle
	for i := range replicas {
		pool, err := su.For(database, names.Runtime).Open(ctx)
		if err != nil {
			return err
		}
		defer pool.Close()
		if err := verify.Readiness(ctx, pool, names); err != nil {
			return err
		}
		cfg := coordinator.DefaultConfig(fmt.Sprintf("demo-replica-%d", i+1))
		cfg.Cadence = 250 * time.Millisecond
		co := coordinator.New(cfg, coordinator.NewStore(pool), slog.New(slog.DiscardHandler))
		lc := coordinator.NewLifecycle(co, cfg)
		if err := lc.Start(ctx); err != nil {
			return err
		}
		coords, lifecycles = append(coords, co), append(lifecycles, lc)
	}
	started := time.Now()
	tick := time.NewTicker(time.Second)
	for done := false; !done; {
		select {
		case <-runCtx.Done():
			done = true
		case <-tick.C:
		}
		var sum coordinator.Snapshot
		for _, co := range coords {
			st := co.Stats.Snapshot()
			sum.Claims += st.Claims
			sum.Admits += st.Admits
			sum.Skips += st.Skips
			sum.Releases += st.Releases
			sum.Races += st.Races
			sum.Errors += st.Errors
		}
		fmt.Fprintf(out, "\r    %4.0fs  claims %-5d admits %-5d skips %-3d releases %-3d races %-3d errors %-3d",
			time.Since(started).Seconds(), sum.Claims, sum.Admits, sum.Skips, sum.Releases, sum.Races, sum.Errors)
	}
	tick.Stop()
	fmt.Fprintln(out)
	for _, lc := range lifecycles {
		if err := lc.Stop(context.Background()); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	for i, co := range coords {
		st := co.Stats.Snapshot()
		fmt.Fprintf(out, "    replica %d: claims %d, admits %d, skips %d, releases %d, races %d, retries %d, errors %d\n",
			i+1, st.Claims, st.Admits, st.Skips, st.Releases, st.Races, st.Retries, st.Errors)
	}

	step("admitted runs (newest 8)")
	runs, err := db.New(adminPool).ListRuns(ctx, db.ListRunsParams{MaxRows: 8})
	if err != nil {
		return err
	}
	for _, r := range runs {
		fmt.Fprintf(out, "    %s  %-13s scheduled %s  lag %4dms  %s  attempts %d events %d\n", r.RunID, r.TriggerID.String,
			time.UnixMilli(r.ScheduledForMs.Int64).UTC().Format("15:04:05.000"), r.QueuedAtMs.Int64-r.ScheduledForMs.Int64,
			r.State, r.Attempts, r.Events)
	}
	step("exactly-once audit")
	audit, err := db.New(adminPool).AuditExactlyOnce(ctx)
	if err != nil {
		return err
	}
	problems := 0
	for _, a := range audit {
		fmt.Fprintf(out, "    %-13s runs %-4d occurrences %-4d duplicates %d  misshapen %d  lag p50 %4.0fms max %4dms\n",
			a.TriggerID, a.Runs, a.Occurrences, a.Duplicates, a.Misshapen, a.LagP50Ms, a.LagMaxMs)
		problems += int(a.Duplicates + a.Misshapen)
	}
	if problems != 0 {
		return cli.Problemf("exactly-once audit failed: %d duplicate or misshapen runs", problems)
	}
	fmt.Fprintln(out, "    every occurrence admitted exactly once: 1 Run, 1 Attempt, 2 Events each")
	return nil
}

func mustResolve(url string) *dbconn.Config {
	cfg, err := dbconn.Resolve(url)
	if err != nil {
		panic(err) // URLs built here always parse
	}
	return cfg
}
