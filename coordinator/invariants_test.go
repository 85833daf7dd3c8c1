package coordinator

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/qlcontrol/controlcore/schedule"
)

// The database guards the invariants admission relies on, so a role that may insert Runs (the
// runtime role) cannot forge a second Run for an occurrence, whatever statement it sends.
func TestRunsTableRefusesForgedRuns(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rev1 := f.trigger("nightly", "0 3 * * *", schedule.MisfireSkip)
	// the next revision: new content (the publisher writes no revision for unchanged content)
	rev2 := f.trigger("nightly", "0 3 * * *", schedule.MisfireFireOnce)
	if rev1.Revision != 1 || rev2.Revision != 2 {
		t.Fatalf("revisions %d and %d, want 1 and 2", rev1.Revision, rev2.Revision)
	}
	const at = int64(1_767_236_400_000) // an occurrence of "0 3 * * *" in UTC
	key := func(rev int64) string { return fmt.Sprintf("ql3:cron:v1:nightly:%d:%d", rev, at) }
	ctx := context.Background()
	insert := func(rev any, trigger any, scheduled any, key string, owner string) error {
		_, err := f.rt.Pool().Exec(ctx, `INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id,
		        trigger_id, trigger_revision, scheduled_for_ms, idempotency_key, state, owner, queued_at_ms)
		    SELECT gen_random_uuid(), tr.project_id, tr.task_id, tr.task_revision, k.execution_revision_id,
		           $2::text, $1::bigint, $3::bigint, $4, 'queued', $5, control_core.db_now_ms()
		    FROM control_core.trigger_revisions tr
		    JOIN control_core.task_revisions k ON k.project_id = tr.project_id AND k.task_id = tr.task_id AND k.revision = tr.task_revision
		    WHERE tr.project_id = 'p' AND tr.trigger_id = 'nightly' AND tr.revision = 1`, rev, trigger, scheduled, key, owner)
		return err
	}
	if err := insert(rev1.Revision, "nightly", at, key(rev1.Revision), "runtime"); err != nil {
		t.Fatalf("the well-formed first Run of the occurrence: %v", err)
	}
	for _, c := range []struct {
		name       string
		rev        any
		trigger    any
		scheduled  any
		key        string
		constraint string
	}{
		{"the same occurrence under a new key", rev1.Revision, "nightly", at, "forged:1", "runs_cron_key_check"},
		{"a key naming another scheduled time", rev1.Revision, "nightly", at, key(rev1.Revision) + "1", "runs_cron_key_check"},
		{"a key naming another revision", rev1.Revision, "nightly", at + 1, fmt.Sprintf("ql3:cron:v1:nightly:%d:%d", rev2.Revision, at+1), "runs_cron_key_check"},
		{"a key with the other spelling of the number", rev1.Revision, "nightly", at + 1, fmt.Sprintf("ql3:cron:v1:nightly:%d:+%d", rev1.Revision, at+1), "runs_cron_key_check"},
		{"the same occurrence under the next revision, its key well formed", rev2.Revision, "nightly", at, key(rev2.Revision), "runs_occurrence_key"},
	} {
		err := insert(c.rev, c.trigger, c.scheduled, c.key, "runtime")
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.ConstraintName != c.constraint {
			t.Errorf("%s: err %v, want a violation of %s", c.name, err, c.constraint)
		}
	}
	// Nor can an UPDATE move the Run off its occurrence, or make it a manual one, to free the
	// occurrence for a second Run.
	for _, c := range []struct{ name, set string }{
		{"made manual", "trigger_id = NULL, trigger_revision = NULL, scheduled_for_ms = NULL, idempotency_key = 'manual-disguised'"},
		{"moved to another occurrence", fmt.Sprintf("scheduled_for_ms = scheduled_for_ms + 7, idempotency_key = '%s'", fmt.Sprintf("ql3:cron:v1:nightly:%d:%d", rev1.Revision, at+7))},
		{"given another run id", "run_id = gen_random_uuid()"},
	} {
		_, err := f.rt.Pool().Exec(ctx, "UPDATE control_core.runs SET "+c.set+" WHERE trigger_id = 'nightly'")
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23000" {
			t.Errorf("a Run %s: err %v, want the identity guard's integrity_constraint_violation", c.name, err)
		}
	}
	if _, err := f.rt.Pool().Exec(ctx, `UPDATE control_core.attempts SET state = 'dispatching' WHERE run_id IN (SELECT run_id FROM control_core.runs WHERE trigger_id = 'nightly');
		UPDATE control_core.runs SET state = 'dispatching', updated_at_ms = updated_at_ms + 1 WHERE trigger_id = 'nightly'`); err != nil {
		t.Errorf("a Run's state and times stay the runtime's to update: %v", err)
	}
	if n := f.count(`SELECT count(*) FROM control_core.runs WHERE trigger_id = 'nightly'`); n != 1 {
		t.Errorf("runs of nightly: %d, want 1", n)
	}
	// A Run started by hand names no trigger; its key is the caller's, but never a cron
	// occurrence's (it would block that occurrence's admission).
	manual := func(key string) error {
		_, err := f.rt.Pool().Exec(ctx, `INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id,
		        idempotency_key, state, owner, queued_at_ms)
		    SELECT gen_random_uuid(), project_id, task_id, revision, execution_revision_id, $1, 'queued', 'operator', 1
		    FROM control_core.task_revisions WHERE project_id = 'p' LIMIT 1`, key)
		return err
	}
	if err := manual("manual:1"); err != nil {
		t.Errorf("a manual Run with a key of its own: %v", err)
	}
	var pgErr *pgconn.PgError
	if err := manual(key(rev1.Revision) + "000"); !errors.As(err, &pgErr) || pgErr.ConstraintName != "runs_manual_key_check" {
		t.Errorf("a manual Run under a cron key: err %v, want a violation of runs_manual_key_check", err)
	}
}

// The admin audit log's actor and time are the database's: the admin role cannot insert a row
// at all (pg-0019: the database writes them), and whatever an INSERT by the owner says is replaced.
func TestAdminAuditLogIsStampedByTheDatabase(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	admin := f.d.Pool(t, "ql_admin")
	ctx := context.Background()
	var pgErr *pgconn.PgError
	if _, err := admin.Exec(ctx, `INSERT INTO control_core.admin_audit_log (audit_id, at_ms, actor, action, project_id, subject)
	    VALUES (gen_random_uuid(), 1, 'somebody-else', 'project.lock', 'p', 'forged')`); !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Fatalf("an INSERT into the audit log as ql_admin: %v, want permission denied", err)
	}
	if _, err := f.su.Exec(ctx, `INSERT INTO control_core.admin_audit_log (audit_id, at_ms, actor, action, project_id, subject)
	    VALUES (gen_random_uuid(), 1, 'somebody-else', 'project.lock', 'p', 'forged')`); err != nil {
		t.Fatal(err)
	}
	var actor, sessionUser string
	var lagMs int64
	if err := f.su.QueryRow(ctx, `SELECT actor, session_user, control_core.db_now_ms() - at_ms
	    FROM control_core.admin_audit_log WHERE subject = 'forged'`).Scan(&actor, &sessionUser, &lagMs); err != nil {
		t.Fatal(err)
	}
	if actor != sessionUser || actor == "somebody-else" {
		t.Errorf("actor %q, want the session user %q", actor, sessionUser)
	}
	if lagMs < 0 || lagMs > 60_000 {
		t.Errorf("at_ms is %d ms before the database's now, want the insert's own time", lagMs)
	}
	// Every row the publisher's commands left carries the admin role's stamp.
	if n := f.count(`SELECT count(*) FROM control_core.admin_audit_log WHERE subject <> 'forged' AND (actor <> 'ql_admin' OR at_ms < 1e12)`); n != 0 {
		t.Errorf("%d audit rows not stamped by the database", n)
	}
	if n := f.count(`SELECT count(*) FROM control_core.admin_audit_log WHERE subject <> 'forged'`); n == 0 {
		t.Error("the fixture's publishes left no audit rows")
	}
}
