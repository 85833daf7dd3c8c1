package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The admit's pipeline notifies the dispatchers (qlsched_runs_queued, dispatch.WakeChannel) once
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
