package admin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
)

// A run-now request is one Run: retried after the trigger's head moved (the key names the
// revision, so run_now alone would make a second Run), it returns the Run it made; reused for
// another trigger, it is refused and writes nothing.
func TestRunNowRequestIsOneRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	for _, tr := range []string{"nightly", "other"} {
		if _, err := f.pub.PublishTrigger(ctx, spec("p", tr, "task", "0 3 * * *")); err != nil {
			t.Fatal(err)
		}
	}
	req := uuid.New()
	first, err := f.pub.RunNow(ctx, "p", "nightly", req, "rerun")
	if err != nil {
		t.Fatal(err)
	}
	// the head moves between the request and its retry
	if _, err := f.pub.PublishTrigger(ctx, spec("p", "nightly", "task", "0 4 * * *")); err != nil {
		t.Fatal(err)
	}
	again, err := f.pub.RunNow(ctx, "p", "nightly", req, "rerun")
	if err != nil || !again.Already || again.RunID != first.RunID || again.TriggerRevision != first.TriggerRevision {
		t.Errorf("retry after a head move: %+v, %v; want the first Run %s (already)", again, err, first.RunID)
	}
	if _, err := f.pub.RunNow(ctx, "p", "other", req, "rerun"); err == nil {
		t.Errorf("request %s reused for another trigger: no error", req)
	}
	if n := f.count(`SELECT count(*) FROM control_core.runs`); n != 1 {
		t.Errorf("%d Runs for one request, want 1", n)
	}
	if n := f.count(`SELECT count(*) FROM control_core.admin_audit_log WHERE action = 'trigger.run_now'`); n != 1 {
		t.Errorf("%d trigger.run_now audit rows for one request, want 1", n)
	}
}

// Publishing an archived trigger is refused even when the spec is the head's own (an unchanged
// publish writes nothing, but must not answer "unchanged" for a retired id), and enable/disable too.
func TestPublishArchivedTriggerUnchangedIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	s := spec("p", "nightly", "task", "0 3 * * *")
	if _, err := f.pub.PublishTrigger(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pub.ArchiveTrigger(ctx, "p", "nightly"); err != nil {
		t.Fatal(err)
	}
	res, err := f.pub.PublishTrigger(ctx, s)
	if err == nil || !strings.Contains(err.Error(), "archived") {
		t.Errorf("unchanged publish of an archived trigger: %+v, %v; want an archived error", res, err)
	}
}

// An archive racing a direct reset_schedule: the reset waits behind the archive's lock on the
// trigger, then sees the archive and is refused, so no schedule row comes back (the guard used
// to read archived_triggers before the archive committed). And prune_runs refuses a NULL
// dry_run, which used to read as false and delete.
func TestArchiveRacingAResetAndPruneNullDryRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.pub.PublishTrigger(ctx, spec("p", "t", "task", "* * * * *")); err != nil {
		t.Fatal(err)
	}
	pool := f.d.Pool(t, "ql_admin")
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT * FROM control_core.archive_trigger('p', 't')`); err != nil {
		t.Fatal(err)
	}
	reset := make(chan error, 1)
	go func() { _, err := pool.Exec(ctx, `SELECT * FROM control_core.reset_schedule('p', 't')`); reset <- err }()
	eventually.True(t, 10*time.Second, "the reset waiting for the archive's lock", func() bool {
		return f.count(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%reset_schedule%'`) == 1
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-reset; err == nil || !strings.Contains(err.Error(), "archived") {
		t.Errorf("reset_schedule racing the archive: %v; want it refused as archived", err)
	}
	if row := f.scheduleRow("t"); row != "" {
		t.Errorf("an archived trigger has a schedule row again: %s", row)
	}
	_, err = pool.Exec(ctx, `SELECT * FROM control_core.prune_runs('p', 3600000, 10, NULL)`)
	if err == nil || !strings.Contains(err.Error(), "dry_run is NULL") {
		t.Errorf("prune_runs with a NULL dry_run: %v; want it refused", err)
	}
}
