package coordinator

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
)

// An initialisation that PostgreSQL aborts to break a deadlock is run again, as a publish is
// (admin inTxRetrying), instead of losing its claims until their lease ends. The test builds the
// cycle on a real database: another transaction (a publish resetting schedule rows in its own
// order) holds the batch's second row, the initialisation writes the first and waits for the
// second, then the other transaction asks for the first. The initialisation waited first, so its
// deadlock check fires first and aborts it (40P01); the retry waits for the other transaction and
// writes both rows under their fences (the other transaction only locked them).
//
// PostgreSQL checks for a deadlock once per wait, deadlock_timeout after the wait began. At the
// default 1 s for both sides, a cycle closed more than 1 s after the initialisation began to wait
// (the test's poll and lock request late, under load) was missed by the initialisation's one
// check and found by the other transaction's, which was aborted instead: the test failed.
// So the initialisation's sessions check after initCheck, the other transaction after an
// hour (never first), and the cycle has initCheck to close.
func TestAnInitialisationAbortedByADeadlockIsRetried(t *testing.T) {
	t.Parallel()
	const initCheck = "5s"
	f := newFixture(t)
	// two rows waiting for initialisation; no round runs, so not bulkUninitialised's wait for 20 s
	// left of the minute (up to 40 s of this test's 21 s on CI)
	f.bulk("u", 2, "NULL")
	ctx := context.Background()
	f.exec(fmt.Sprintf(`ALTER ROLE ql_runtime IN DATABASE %q SET deadlock_timeout = '%s'`, f.d.Name, initCheck))
	rt := f.d.Handle(t, "ql_runtime") // new sessions, with that setting
	var got string
	if err := rt.Pool().QueryRow(ctx, "SHOW deadlock_timeout").Scan(&got); err != nil || got != initCheck {
		t.Fatalf("the runtime sessions' deadlock_timeout: %q, %v; want %s", got, err, initCheck)
	}
	s := NewStore(rt)
	claims := must(s.ClaimInit(ctx, "r1", time.Minute, 2)).of(t)
	if len(claims) != 2 || claims[0].TriggerID != "u1" || claims[1].TriggerID != "u2" {
		t.Fatalf("claimed %d rows; want u1, u2", len(claims))
	}
	items := make([]InitItem, len(claims))
	for i, c := range claims {
		items[i] = InitItem{Claim: c, First: c.ClaimedAtMs + 60000}
	}

	other, err := f.su.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(ctx)
	if _, err := other.Exec(ctx, `SET LOCAL deadlock_timeout = '1h'`); err != nil {
		t.Fatal(err)
	}
	lock := `SELECT 1 FROM control_core.trigger_schedules WHERE project_id = 'p' AND trigger_id = $1 FOR NO KEY UPDATE`
	if _, err := other.Exec(ctx, lock, "u2"); err != nil {
		t.Fatal(err)
	}
	type result struct {
		written []bool
		err     error
	}
	done := make(chan result, 1)
	go func() {
		w, err := s.Initialise(ctx, items)
		done <- result{w, err}
	}()
	eventually.True(t, 30*time.Second, "the initialisation waits for the second row", func() bool {
		return f.count(`SELECT count(*) FROM pg_stat_activity
		                 WHERE wait_event_type = 'Lock' AND query LIKE '%InitClaimed%' AND datname = current_database()`) == 1
	})
	// Closes the cycle: the initialisation holds u1 (written) and waits for u2.
	if _, err := other.Exec(ctx, lock, "u1"); err != nil {
		t.Fatalf("the other transaction lost the deadlock (the cycle closed more than %s after the initialisation began to wait?); want the initialisation to: %v", initCheck, err)
	}
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("initialise after a deadlock: %v; want it retried", r.err)
	}
	if !r.written[0] || !r.written[1] {
		t.Errorf("written %v; want both rows initialised by the retry", r.written)
	}
	if n := f.uninitialised(); n != 0 {
		t.Errorf("%d rows still wait for initialisation; want 0", n)
	}
}
