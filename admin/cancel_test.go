package admin_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/admin"
)

// insertQueuedRun writes a Run as the admission leaves it (queued, one claimed Attempt, created
// and queued events), as the superuser, in one transaction; it returns the Run's id.
func insertQueuedRun(t *testing.T, f *fixture) uuid.UUID {
	t.Helper()
	id := uuid.New()
	// one statement string, no parameters: several commands in one implicit transaction
	f.d.Exec(t, fmt.Sprintf(`
		INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id, trigger_id,
		        trigger_revision, scheduled_for_ms, idempotency_key, state, owner, queued_at_ms, created_at_ms, updated_at_ms)
		SELECT '%[1]s'::uuid, 'p', 'task', 1, kr.execution_revision_id, NULL, NULL, NULL, 'manual:%[1]s', 'queued', 'runtime',
		       control_core.db_now_ms(), control_core.db_now_ms(), control_core.db_now_ms()
		FROM control_core.task_revisions kr WHERE kr.project_id = 'p' AND kr.task_id = 'task' AND kr.revision = 1;
		INSERT INTO control_core.attempts (attempt_id, run_id, attempt_no, executor_kind, state, created_at_ms, updated_at_ms)
		VALUES (gen_random_uuid(), '%[1]s'::uuid, 1, 'remote_worker', 'claimed', control_core.db_now_ms(), control_core.db_now_ms());
		INSERT INTO control_core.run_events (event_id, run_id, seq, type, at_ms, detail)
		VALUES (gen_random_uuid(), '%[1]s'::uuid, 1, 'run.created', control_core.db_now_ms(), '{}'),
		       (gen_random_uuid(), '%[1]s'::uuid, 2, 'run.queued', control_core.db_now_ms(), '{}')`, id))
	return id
}

// A queued Run is cancelled with its Attempt, one run.cancelled event and one run.cancel audit
// row; a second cancel, and a cancel of a terminal Run, writes nothing and reports Already; an
// unknown id is ErrNotFound.
func TestCancelRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	run := insertQueuedRun(t, f)
	mark := f.auditMark()

	res, err := f.pub.CancelRun(ctx, run, "bad input")
	if err != nil || res.From != "queued" || res.State != "cancelled" || res.Already {
		t.Fatalf("cancel: %+v, %v; want queued → cancelled", res, err)
	}
	if n := f.count(`SELECT count(*) FROM control_core.runs r JOIN control_core.attempts a USING (run_id)
		WHERE r.run_id = $1 AND r.state = 'cancelled' AND a.state = 'cancelled' AND r.finished_at_ms IS NOT NULL`, run); n != 1 {
		t.Errorf("after cancel: %d Runs cancelled with their Attempt, want 1", n)
	}
	events := func() int {
		return f.count(`SELECT count(*) FROM control_core.run_events WHERE run_id = $1 AND type = 'run.cancelled'`, run)
	}
	if events() != 1 {
		t.Errorf("%d run.cancelled events, want 1", events())
	}
	audits := func() int {
		return f.count(`SELECT count(*) FROM control_core.admin_audit_log WHERE action = 'run.cancel' AND actor = 'ql_admin'`)
	}
	if got := f.auditRows(mark); len(got) != 1 || audits() != 1 {
		t.Errorf("audit rows %q; want one run.cancel by ql_admin", got)
	}

	again, err := f.pub.CancelRun(ctx, run, "again")
	if err != nil || !again.Already || again.State != "cancelled" {
		t.Errorf("second cancel: %+v, %v; want already cancelled", again, err)
	}
	if events() != 1 || audits() != 1 {
		t.Errorf("a second cancel wrote: %d events, %d audit rows; want 1 and 1", events(), audits())
	}
	done := insertQueuedRun(t, f)
	f.d.Exec(t, fmt.Sprintf(`UPDATE control_core.attempts SET state = 'succeeded', finished_at_ms = control_core.db_now_ms() WHERE run_id = '%[1]s';
		UPDATE control_core.runs SET state = 'succeeded', finished_at_ms = control_core.db_now_ms() WHERE run_id = '%[1]s'`, done))
	term, err := f.pub.CancelRun(ctx, done, "")
	if err != nil || !term.Already || term.State != "succeeded" || term.From != "succeeded" {
		t.Errorf("cancel of a succeeded Run: %+v, %v; want already succeeded", term, err)
	}
	if n := f.count(`SELECT count(*) FROM control_core.runs WHERE run_id = $1 AND state = 'succeeded'`, done); n != 1 {
		t.Error("a cancel changed a succeeded Run")
	}
	if _, err := f.pub.CancelRun(ctx, uuid.New(), ""); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("unknown Run: %v, want ErrNotFound", err)
	}
	var fe *admin.FieldError
	if _, err := admin.NewPublisher(nil).CancelRun(ctx, run, strings.Repeat("x", 300)); !errors.As(err, &fe) || fe.Field != admin.FieldReason {
		t.Errorf("a 300-character reason: %v, want a FieldError naming reason", err)
	}
}
