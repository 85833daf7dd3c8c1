//go:build faults

package faults

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/app/pgcluster"
)

// Gate 2: physical promotion. A primary and a streaming standby on loopback ports. A replica
// takes a claim with a 15 s lease on the primary and is lost with it; the claim is shown
// replayed on the standby; the old primary is fenced (stopped); the standby is promoted
// (timeline 1 → 2); two fresh coordinators start on the new primary and claim nothing while the
// database's time is before the claim's expiry, then exactly one of them takes it over (claim
// version +1) and admits the occurrence once.
func TestGatePhysicalPromotion(t *testing.T) {
	ctx := context.Background()
	logf, err := os.Create(filepath.Join(t.TempDir(), "postgres.log"))
	if err != nil {
		t.Fatal(err)
	}
	primary := startOwnCluster(t, pgcluster.Options{Log: logf, Settings: map[string]string{
		"wal_level": "replica", "max_wal_senders": "4", "wal_keep_size": "64MB"}})
	tg := primary.target(t, primary.Cluster, true)
	occurrence := tg.due("a")

	standby, err := pgcluster.StartStandby(ctx, primary.Cluster, pgcluster.Options{Log: logf})
	if err != nil {
		t.Fatalf("start standby: %v", err)
	}
	t.Cleanup(func() { _ = standby.Stop() })
	if in, err := standby.InRecovery(ctx); err != nil || !in {
		t.Fatalf("standby in recovery: %v %v", in, err)
	}
	tli, err := standby.Timeline(ctx)
	if err != nil || tli != 1 {
		t.Fatalf("standby timeline before promotion: %d %v; want 1", tli, err)
	}

	// A replica claims on the primary with a 15 s lease and is never heard of again.
	const lease = 15 * time.Second
	lost := tg.pool(replicaOptions{app: "gate2-lost"})
	claim, err := coordinator.NewStore(lost).Claim(ctx, "replica-lost", lease)
	if err != nil || claim == nil {
		t.Fatalf("claim on the primary: %+v %v", claim, err)
	}
	expires := claim.Fence.ExpiresAtMs
	lsn, err := pgcluster.WaitReplayed(ctx, primary.Cluster, standby)
	if err != nil {
		t.Fatal(err)
	}
	onStandby := readOn(t, standby, primary.Database, func(conn *pgx.Conn) (standbyView, error) {
		var s standbyView
		var err error
		if s.sch, err = readSchedule(ctx, conn, "a"); err != nil {
			return s, err
		}
		err = conn.QueryRow(ctx, `SELECT claim_token::text, control_core.db_now_ms(),
			(SELECT count(*) FROM control_core.runs WHERE trigger_id = 'a' AND scheduled_for_ms = $1)
			FROM control_core.trigger_schedules WHERE trigger_id = 'a'`, occurrence).Scan(&s.token, &s.now, &s.runs)
		return s, err
	})
	t.Logf("claim replayed on the standby at LSN %s: owner %s, version %d, token %s, expires %d; standby db time %d (%d ms of lease left), %d runs for the occurrence",
		lsn, onStandby.sch.Owner, onStandby.sch.ClaimVersion, onStandby.token, onStandby.sch.ClaimExpires,
		onStandby.now, onStandby.sch.ClaimExpires-onStandby.now, onStandby.runs)
	if onStandby.sch.Owner != "replica-lost" || onStandby.token != claim.Fence.Token.String() ||
		onStandby.sch.ClaimVersion != claim.Fence.Version || onStandby.sch.ClaimExpires != expires {
		t.Fatalf("standby holds %+v token %s; want the primary's claim v%d %s expiring %d",
			onStandby.sch, onStandby.token, claim.Fence.Version, claim.Fence.Token, expires)
	}
	if onStandby.runs != 0 || onStandby.now >= expires {
		t.Fatalf("standby: %d runs, now %d; want 0 runs and a live lease (expires %d)", onStandby.runs, onStandby.now, expires)
	}

	// Fence the old primary, promote the standby.
	lost.Close()
	if err := primary.Stop(); err != nil {
		t.Fatalf("fence the old primary: %v", err)
	}
	if conn, err := pgx.Connect(ctx, primary.URL("postgres", "postgres")); err == nil {
		conn.Close(ctx)
		t.Fatal("the old primary still accepts connections after the fence")
	}
	promoteStart := time.Now()
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	tli2, err := standby.Timeline(ctx)
	if err != nil || tli2 != 2 {
		t.Fatalf("timeline after promotion: %d %v; want 2", tli2, err)
	}
	t.Logf("old primary fenced; standby promoted in %s: timeline %d → %d (pg_control_checkpoint)", time.Since(promoteStart).Round(time.Millisecond), tli, tli2)

	// Two fresh coordinators on the new primary: readiness, startup recovery, then rounds.
	np := primary.target(t, standby, false)
	var replicas []*coordinator.Coordinator
	for _, owner := range []string{"fresh-1", "fresh-2"} {
		pool := np.pool(replicaOptions{app: "gate2-" + owner})
		if err := ready(ctx, pool); err != nil {
			t.Fatalf("%s readiness on the promoted standby: %v", owner, err)
		}
		if rep, err := coordinator.Recover(ctx, pool, testLogger(owner)); err != nil || rep.Candidates != 0 {
			t.Fatalf("%s startup recovery: %+v %v", owner, rep, err)
		}
		replicas = append(replicas, coordinatorFor(t, owner, pool, 30*time.Second))
	}
	roundsBeforeExpiry := 0
	for np.runsOf("a", occurrence) == 0 {
		var wg sync.WaitGroup
		for _, co := range replicas {
			wg.Add(1)
			go func() { defer wg.Done(); co.Round(ctx, nil) }()
		}
		wg.Wait()
		// every claim of these rounds was observed no later than now
		if now := np.dbNow(); now < expires {
			roundsBeforeExpiry++
			for _, co := range replicas {
				if n := co.Stats.Claims.Load(); n != 0 {
					t.Fatalf("%d claims at db time %d, before the lost claim expired at %d", n, now, expires)
				}
			}
		}
		if time.Since(promoteStart) > 2*lease+30*time.Second {
			t.Fatal("no takeover within twice the lease")
		}
		// not synchronisation: the coordinators' cadence, their rounds spread over the lost
		// claim's lease, each checked above (waiting out the lease is what is tested)
		time.Sleep(100 * time.Millisecond)
	}
	var admittedAt int64
	if err := np.su.QueryRow(ctx, "SELECT queued_at_ms FROM control_core.runs WHERE trigger_id = 'a'").Scan(&admittedAt); err != nil {
		t.Fatal(err)
	}
	final := np.schedule("a")
	s1, s2 := replicas[0].Stats.Snapshot(), replicas[1].Stats.Snapshot()
	t.Logf("fresh coordinators ran %d rounds each with db time before expiry and claimed nothing; takeover admitted at db time %d (expiry %d); claim version %d → %d; fresh-1 %+v; fresh-2 %+v",
		roundsBeforeExpiry, admittedAt, expires, claim.Fence.Version, final.ClaimVersion, s1, s2)
	if roundsBeforeExpiry == 0 {
		t.Error("no round ran before the expiry: the gate proved nothing about it")
	}
	if admittedAt < expires {
		t.Errorf("admitted at %d, before the expiry %d", admittedAt, expires)
	}
	if final.ClaimVersion != claim.Fence.Version+1 || s1.Takeovers+s2.Takeovers != 1 || s1.Admits+s2.Admits != 1 || s1.Races+s2.Races != 0 {
		t.Errorf("claim version %d → %d, takeovers %d, admits %d, races %d; want +1, 1, 1, 0",
			claim.Fence.Version, final.ClaimVersion, s1.Takeovers+s2.Takeovers, s1.Admits+s2.Admits, s1.Races+s2.Races)
	}
	if n := np.runsOf("a", occurrence); n != 1 {
		t.Errorf("%d runs for the occurrence, want 1", n)
	}
	requireAudit(t, np.su, 1)
}

// standbyView is what the standby shows of the claimed schedule.
type standbyView struct {
	sch       schedule
	token     string
	now, runs int64
}

// readOn runs f on a superuser connection to database on server (a standby is read-only).
func readOn[T any](t *testing.T, server *pgcluster.Cluster, database string, f func(*pgx.Conn) (T, error)) T {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, server.URL("postgres", database))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	v, err := f(conn)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
