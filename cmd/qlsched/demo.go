package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/internal/cli"
	"github.com/qlcontrol/controlcore/internal/dbconn"
	"github.com/qlcontrol/controlcore/internal/migrate"
	"github.com/qlcontrol/controlcore/internal/pgcluster"
	"github.com/qlcontrol/controlcore/roles"
)

func (a *app) demoCmd() *cobra.Command {
	var (
		replicas int
		duration time.Duration
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole stack on an embedded throwaway PostgreSQL, then remove it",
		Long: `demo starts a throwaway PostgreSQL from this machine's server binaries (QL_PG_BIN,
pg_config or /usr/lib/postgresql/*/bin), creates the four roles, applies the migration stream as
the owner role, and prints the migration status. Everything it started is stopped and removed at
the end, also on Ctrl-C.`,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if replicas < 1 || replicas > 8 {
				return cli.Usagef("--replicas %d: want 1 … 8", replicas)
			}
			if duration < time.Second || duration > 10*time.Minute {
				return cli.Usagef("--duration %s: want 1s … 10m", duration)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), cmd.OutOrStdout())
		},
	}
	cmd.Flags().IntVar(&replicas, "replicas", 2, "scheduler replicas to run (1 … 8)")
	cmd.Flags().DurationVar(&duration, "duration", 20*time.Second, "how long the replicas run (1s … 10m)")
	return cmd
}

func runDemo(ctx context.Context, out io.Writer) error {
	step := func(format string, args ...any) { fmt.Fprintf(out, "==> "+format+"\n", args...) }
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

	names, _ := roles.NewNames(roles.DefaultPrefix)
	su, err := pgx.Connect(ctx, cluster.URL("postgres", "postgres"))
	if err != nil {
		return &dbconn.ConnectError{Err: err}
	}
	defer su.Close(context.Background())
	if _, err := su.Exec(ctx, "CREATE DATABASE control"); err != nil {
		return err
	}
	step("qlmigrate roles create")
	conn, err := pgx.Connect(ctx, cluster.URL("postgres", "control"))
	if err != nil {
		return &dbconn.ConnectError{Err: err}
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
	cfg, err := dbconn.Resolve(cluster.URL(names.Owner, "control"))
	if err != nil {
		return err
	}
	r, err := migrate.Open(ctx, cfg, migrate.Options{Names: names, AsOwner: true})
	if err != nil {
		return err
	}
	defer r.Close()
	applied, err := r.Up(ctx, 0)
	if err != nil {
		return err
	}
	step("applied %d migrations", len(applied))
	status, err := r.Status(ctx)
	if err != nil {
		return err
	}
	for _, s := range status {
		fmt.Fprintf(out, "    %-40s %s  checksum %s\n", s.Migration.Name, s.AppliedAt.UTC().Format(time.RFC3339), s.Checksum)
	}
	return nil
}
