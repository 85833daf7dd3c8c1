package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A committed admit notifies the dispatchers (qlsched_runs_queued, dispatch.WakeChannel) once
// when it admitted a Run, and not when it admitted none: a race (the claim taken over) is
// followed by a sentinel, which must be the next notification.
func TestAdmitNotifiesTheDispatchersOnlyWhenItWrote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, s := dueFixture(t, time.Second, "a", "b")
	conn, err := pgx.Connect(ctx, f.d.URL("ql_runtime"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "LISTEN qlsched_runs_queued"); err != nil {
		t.Fatal(err)
	}
	next := func() string {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := conn.WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("no notification: %v", err)
		}
		return n.Payload
	}
	claims := must(s.ClaimBatch(ctx, "batcher", 30*time.Second, 10)).of(t)
	if len(claims) != 2 {
		t.Fatalf("claimed %d rows, want 2", len(claims))
	}
	if res := s.AdmitBatch(ctx, items(claims[:1], 60_000), 3); res[0].Err != nil || res[0].Outcome != Written {
		t.Fatalf("admit: %+v", res[0])
	}
	if p := next(); p != "" {
		t.Fatalf("payload %q, want empty", p)
	}
	f.expireClaim(claims[1].TriggerID)
	if c := must(s.Claim(ctx, "other", 30*time.Second)).of(t); c == nil {
		t.Fatal("no takeover")
	}
	if res := s.AdmitBatch(ctx, items(claims[1:], 60_000), 3); res[0].Err != nil || res[0].Outcome != Race {
		t.Fatalf("admit after the takeover: %+v", res[0])
	}
	f.exec(`SELECT pg_notify('qlsched_runs_queued', 'sentinel')`)
	if p := next(); p != "sentinel" {
		t.Fatalf("notification %q after an admit that wrote nothing, want the sentinel", p)
	}
}

// The wake-up is no part of the admit: it is sent in a transaction of its own once the admit
// committed. Were it in the admit's transaction, every notifying commit would wait for the one
// before it to be flushed (PostgreSQL's one notification queue lock, held through the commit),
// and a NOTIFY that fails (a full notification queue, say; here: pg_notify refused to the
// runtime role, in this database only) would roll back the admit and lose its Run.
func TestAdmitDoesNotDependOnItsWakeUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, s := dueFixture(t, time.Second, "a")
	f.exec(`REVOKE EXECUTE ON FUNCTION pg_catalog.pg_notify(text, text) FROM PUBLIC`)
	claims := must(s.ClaimBatch(ctx, "batcher", 30*time.Second, 10)).of(t)
	if len(claims) != 1 {
		t.Fatalf("claimed %d rows, want 1", len(claims))
	}
	if res := s.AdmitBatch(ctx, items(claims, 60_000), 3); res[0].Err != nil || res[0].Outcome != Written {
		t.Fatalf("admit with the wake-up refused: %+v", res[0])
	}
	if n := f.count(`SELECT count(*) FROM control_core.runs WHERE trigger_id = 'a'`); n != 1 {
		t.Fatalf("%d Runs, want 1", n)
	}
}
