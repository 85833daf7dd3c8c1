package pgcluster

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Both ways of making a standby (pg_basebackup where the binaries have it, the low-level backup
// API always) give a hot standby that holds what the primary committed before and streams what
// it commits after.
func TestStandbyStreamsThePrimary(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Stop()
	exec := func(c *Cluster, sql string) {
		t.Helper()
		if err := c.superuser(ctx, func(conn *pgx.Conn) error { _, err := conn.Exec(ctx, sql); return err }); err != nil {
			t.Fatalf("port %d: %s: %v", c.Port, sql, err)
		}
	}
	exec(primary, "CREATE TABLE public.t (n int); INSERT INTO public.t SELECT generate_series(1, 1000)")

	for _, lowLevel := range []bool{false, true} {
		standby, err := startStandby(ctx, primary, Options{}, lowLevel)
		if err != nil {
			t.Fatalf("low-level %v: %v", lowLevel, err)
		}
		exec(primary, "INSERT INTO public.t VALUES (-1)")
		if _, err := WaitReplayed(ctx, primary, standby); err != nil {
			t.Fatalf("low-level %v: %v", lowLevel, err)
		}
		var rows int
		var inRecovery bool
		if err := standby.superuser(ctx, func(conn *pgx.Conn) error {
			return conn.QueryRow(ctx, "SELECT count(*), pg_is_in_recovery() FROM public.t").Scan(&rows, &inRecovery)
		}); err != nil {
			t.Fatalf("low-level %v: %v", lowLevel, err)
		}
		if want := 1001 + map[bool]int{false: 0, true: 1}[lowLevel]; rows != want || !inRecovery {
			t.Errorf("low-level %v: standby holds %d rows (want %d), in recovery %v (want true)", lowLevel, rows, want, inRecovery)
		}
		standby.Stop()
	}
}
