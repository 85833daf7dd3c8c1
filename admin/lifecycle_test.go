package admin_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/qlcontrol/controlcore/admin"
)

// scheduleRow is a trigger's schedule row as text (cursor, fence, versions), "" when it has none.
func (f *fixture) scheduleRow(trigger string) string {
	f.t.Helper()
	var row string
	err := f.d.Pool(f.t, "").QueryRow(context.Background(), `SELECT coalesce((SELECT row_to_json(s)::text
		FROM control_core.trigger_schedules s WHERE s.project_id = 'p' AND s.trigger_id = $1), '')`, trigger).Scan(&row)
	if err != nil {
		f.t.Fatal(err)
	}
	return row
}

// run-now queues exactly one manual Run of the head revision with its Attempt and events, keyed
// ql3:now:v1:<trigger>:<revision>:<request>, audited, the schedule row (cursor and fence) as it
// was; the same request again returns that Run. A paused project, a disabled or archived trigger
// and a revision that does not recompute to its digest are refused and write nothing.
func TestRunNow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	for _, s := range []admin.TriggerSpec{spec("p", "nightly", "task", "0 3 * * *"), spec("p", "off", "task", "0 3 * * *"),
		spec("p", "gone", "task", "0 3 * * *"), spec("p", "forged", "task", "0 3 * * *")} {
		if s.Trigger == "off" {
			s.Enabled = false
		}
		if _, err := f.pub.PublishTrigger(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	// a cursor and a live claim on nightly's row: run-now must leave both
	f.d.Exec(t, `UPDATE control_core.trigger_schedules SET next_fire_at_ms = control_core.db_now_ms() + 3600000,
		claim_owner = 'c1', claim_token = gen_random_uuid(), claim_version = claim_version + 1,
		claim_expires_at_ms = updated_at_ms + 600000 WHERE project_id = 'p' AND trigger_id = 'nightly'`)
	before := f.scheduleRow("nightly")
	audits := func() int {
		return f.count(`SELECT count(*) FROM control_core.admin_audit_log WHERE action = 'trigger.run_now'`)
	}
	req := uuid.New()
	res, err := f.pub.RunNow(ctx, "p", "nightly", req, "rerun")
	if err != nil || res.Already || res.TriggerRevision != 1 || res.Request != req {
		t.Fatalf("run-now: %+v, %v", res, err)
	}
	wantKey := fmt.Sprintf("ql3:now:v1:nightly:1:%s", req)
	if res.IdempotencyKey != wantKey {
		t.Errorf("key %q, want %q", res.IdempotencyKey, wantKey)
	}
	if n := f.count(`SELECT count(*) FROM control_core.runs WHERE run_id = $1 AND state = 'queued' AND owner = 'operator'
		AND trigger_id IS NULL AND task_id = 'task' AND task_revision = 1 AND idempotency_key = $2
		AND (SELECT count(*) FROM control_core.attempts a WHERE a.run_id = $1 AND a.state = 'claimed' AND a.attempt_no = 1) = 1
		AND (SELECT count(*) FROM control_core.run_events e WHERE e.run_id = $1) = 2`, res.RunID, wantKey); n != 1 {
		t.Errorf("the Run as stored does not match (found %d)", n)
	}
	if n := f.count(`SELECT count(*) FROM control_core.runs`); n != 1 {
		t.Errorf("%d Runs, want exactly 1", n)
	}
	if n := f.count(`SELECT count(*) FROM control_core.admin_audit_log WHERE action = 'trigger.run_now' AND subject = 'nightly'
		AND detail->>'run_id' = $1 AND detail->>'reason' = 'rerun'`, res.RunID.String()); n != 1 {
		t.Errorf("%d trigger.run_now audit rows naming the Run, want 1", n)
	}
	if after := f.scheduleRow("nightly"); after != before {
		t.Errorf("schedule row changed:\n before %s\n after  %s", before, after)
	}
	again, err := f.pub.RunNow(ctx, "p", "nightly", req, "rerun")
	if err != nil || !again.Already || again.RunID != res.RunID || audits() != 1 {
		t.Errorf("the same request again: %+v, %v, %d audit rows; want the same Run, already, 1 audit row", again, err, audits())
	}

	if _, err := f.pub.ArchiveTrigger(ctx, "p", "gone"); err != nil {
		t.Fatal(err)
	}
	f.d.Exec(t, `UPDATE control_core.trigger_revisions SET cron_spec = '0 4 * * *' WHERE project_id = 'p' AND trigger_id = 'forged'`)
	for _, c := range []struct {
		name, trigger, want string
		setup, undo         func()
	}{
		{"paused project", "nightly", "not active", func() { _, _ = f.pub.PauseProject(ctx, "p") }, func() { _, _ = f.pub.ResumeProject(ctx, "p") }},
		{"disabled trigger", "off", "disabled", nil, nil},
		{"archived trigger", "gone", "archived", nil, nil},
		{"tampered trigger revision", "forged", "digest", nil, nil},
		{"tampered execution revision", "nightly", "digest", func() {
			f.d.Exec(t, `UPDATE control_core.execution_revisions SET spec = '{"image":"evil"}'`)
		}, func() { f.d.Exec(t, `UPDATE control_core.execution_revisions SET spec = '{"image":"example/job:1"}'`) }},
		{"unknown trigger", "nope", "does not exist", nil, nil},
	} {
		if c.setup != nil {
			c.setup()
		}
		_, err := f.pub.RunNow(ctx, "p", c.trigger, uuid.New(), "")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error containing %q", c.name, err, c.want)
		}
		if n := f.count(`SELECT count(*) FROM control_core.runs`); n != 1 || audits() != 1 {
			t.Errorf("%s: %d Runs, %d audit rows after a refusal; want 1 and 1", c.name, n, audits())
		}
		if c.undo != nil {
			c.undo()
		}
	}
	// the project resumed and the spec restored: it runs again (the refusals were the conditions)
	if _, err := f.pub.RunNow(ctx, "p", "nightly", uuid.New(), ""); err != nil {
		t.Errorf("after undoing the refusals: %v", err)
	}
}

// Archive deletes the schedule row (gone from lists, never claimed: the claim reads only schedule
// rows, and none can be inserted again), keeps revisions, Runs and audit rows, is audited once,
// idempotent, and a publish of the id is refused with a message naming the archive.
func TestArchiveTrigger(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	for _, id := range []string{"old", "kept"} {
		if _, err := f.pub.PublishTrigger(ctx, spec("p", id, "task", "* * * * *")); err != nil {
			t.Fatal(err)
		}
	}
	run, err := f.pub.RunNow(ctx, "p", "old", uuid.Nil, "")
	if err != nil {
		t.Fatal(err)
	}
	history := func() int {
		return f.count(`SELECT (SELECT count(*) FROM control_core.trigger_revisions WHERE trigger_id = 'old')
			+ (SELECT count(*) FROM control_core.runs WHERE run_id = $1)
			+ (SELECT count(*) FROM control_core.admin_audit_log WHERE subject = 'old' AND action <> 'trigger.archive')`, run.RunID)
	}
	hist := history()
	res, err := f.pub.ArchiveTrigger(ctx, "p", "old")
	if err != nil || res.Already || res.Revision != 1 || res.ArchivedAtMs <= 0 {
		t.Fatalf("archive: %+v, %v", res, err)
	}
	if f.scheduleRow("old") != "" || f.scheduleRow("kept") == "" {
		t.Errorf("schedule rows: old %q (want none), kept %q", f.scheduleRow("old"), f.scheduleRow("kept"))
	}
	if h := history(); h != hist {
		t.Errorf("history rows %d, want %d kept", h, hist)
	}
	list, err := admin.NewReader(f.d.Handle(t, "ql_admin")).Triggers(ctx, admin.TriggerFilter{Project: "p", Limit: 50})
	if err != nil || len(list) != 1 || list[0].TriggerID != "kept" {
		t.Errorf("trigger list %+v, %v; want kept alone", list, err)
	}
	// never claimable again: the admin's one schedule writer (reset_schedule) cannot bring the row back
	_, err = f.d.Pool(t, "ql_admin").Exec(ctx, `SELECT control_core.reset_schedule('p', 'old')`)
	if err == nil || !strings.Contains(err.Error(), "archived") {
		t.Errorf("reset_schedule of an archived trigger: %v; want refused", err)
	}
	// a publish of the id, any change, is refused and names the archive
	_, err = f.pub.PublishTrigger(ctx, spec("p", "old", "task", "0 5 * * *"))
	if !errors.Is(err, admin.ErrNotFound) || !strings.Contains(err.Error(), "archived") {
		t.Errorf("publish of an archived trigger: %v; want a state error naming the archive", err)
	}
	// a rollout of the task moves the live trigger and leaves the archived one alone
	if _, err := f.pub.PublishTask(ctx, admin.TaskSpec{Project: "p", Task: "task", ExecutorSpec: []byte(`{"image":"example/job:2"}`)}); err != nil {
		t.Fatal(err)
	}
	roll, err := f.pub.RolloutTask(ctx, "p", "task", false)
	if err != nil || len(roll.Triggers) != 1 || roll.Triggers[0].TriggerID != "kept" {
		t.Errorf("rollout after an archive: %+v, %v; want kept alone", roll, err)
	}
	again, err := f.pub.ArchiveTrigger(ctx, "p", "old")
	if err != nil || !again.Already || again.ArchivedAtMs != res.ArchivedAtMs {
		t.Errorf("archive again: %+v, %v; want already", again, err)
	}
	if n := f.count(`SELECT count(*) FROM control_core.admin_audit_log WHERE action = 'trigger.archive' AND subject = 'old'`); n != 1 {
		t.Errorf("%d trigger.archive audit rows, want 1", n)
	}
	if _, err := f.pub.ArchiveTrigger(ctx, "p", "nope"); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("archive of an unknown trigger: %v; want ErrNotFound", err)
	}
}

// Prune deletes, in batches, only the project's terminal Runs finished before the cutoff, with
// their Attempts, events, offers and leases (which name each other); a young Run, a live Run and a
// cancelled Run whose Attempt and lease are still live stay; each batch is audited; a dry run
// deletes nothing; under an hour is refused before anything is sent; the runtime may not call it.
func TestPruneRuns(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.pub.PublishTrigger(ctx, spec("p", "t", "task", "0 3 * * *")); err != nil {
		t.Fatal(err)
	}
	tok, err := f.pub.CreateWorkerToken(ctx, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	f.d.Exec(t, `INSERT INTO control_core.worker_sessions (worker_session_id, worker_id, state, capacity, heartbeat_at_ms,
		expires_at_ms, created_at_ms, worker_token_id, labels, protocol)
		SELECT '00000000-0000-0000-0000-0000000000a1', 'w', 'active', 4, n, n + 30000, n, $1, '{}', 1
		FROM (SELECT control_core.db_now_ms() AS n) x`, tok.ID)
	newRun := func() uuid.UUID {
		r, err := f.pub.RunNow(ctx, "p", "t", uuid.Nil, "")
		if err != nil {
			t.Fatal(err)
		}
		return r.RunID
	}
	finished := func(id uuid.UUID, ago time.Duration) {
		if _, err := f.pub.CancelRun(ctx, id, ""); err != nil {
			t.Fatal(err)
		}
		f.d.Exec(t, `UPDATE control_core.runs SET finished_at_ms = control_core.db_now_ms() - $2::bigint WHERE run_id = $1`, id, ago.Milliseconds())
	}
	// an offer and a lease of the Run's Attempt, which the Attempt names back
	withLoopRows := func(id uuid.UUID, leaseState string) {
		f.d.Exec(t, `WITH a AS (SELECT attempt_id FROM control_core.attempts WHERE run_id = $1),
			o AS (INSERT INTO control_core.dispatch_offers (offer_id, attempt_id, worker_session_id, state, offered_at_ms, expires_at_ms, answered_at_ms)
			      SELECT gen_random_uuid(), a.attempt_id, '00000000-0000-0000-0000-0000000000a1', 'acked', 1000, 2000, 1500 FROM a RETURNING offer_id, attempt_id),
			l AS (INSERT INTO control_core.run_leases (run_lease_id, attempt_id, worker_session_id, lease_version, state, granted_at_ms, expires_at_ms, run_id, ended_at_ms)
			      SELECT gen_random_uuid(), a.attempt_id, '00000000-0000-0000-0000-0000000000a1', 1, $2::text, 1500,
			             control_core.db_now_ms() + 600000, $1, CASE WHEN $2::text = 'active' THEN NULL ELSE 1600 END FROM a RETURNING run_lease_id, attempt_id)
			UPDATE control_core.attempts x SET offer_id = o.offer_id, run_lease_id = l.run_lease_id
			FROM o, l WHERE x.attempt_id = o.attempt_id AND x.attempt_id = l.attempt_id`, id, leaseState)
	}
	old1, old2, young, live, stillRunning, leased := newRun(), newRun(), newRun(), newRun(), newRun(), newRun()
	finished(old1, 3*time.Hour)
	withLoopRows(old1, "released")
	finished(old2, 2*time.Hour)
	finished(young, 0)
	// cancelled while running, its worker not reported yet: the Attempt still runs; and one whose
	// lease is still active (each guard on its own)
	finished(stillRunning, 3*time.Hour)
	withLoopRows(stillRunning, "released")
	f.d.Exec(t, `UPDATE control_core.attempts SET state = 'running' WHERE run_id = $1`, stillRunning)
	finished(leased, 3*time.Hour)
	withLoopRows(leased, "active")

	rt := f.d.Pool(t, "ql_runtime")
	for _, call := range []string{`SELECT * FROM control_core.prune_runs('p', 7200000, 10, false)`,
		`SELECT * FROM control_core.run_now('p', 't', gen_random_uuid(), '')`, `SELECT * FROM control_core.archive_trigger('p', 't')`} {
		var pgErr *pgconn.PgError
		if _, err := rt.Exec(ctx, call); !errors.As(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("ql_runtime: %s: %v; want permission denied", call, err)
		}
	}
	if _, err := f.pub.PruneRuns(ctx, admin.PruneRequest{Project: "p", OlderThan: 30 * time.Minute, Batch: 1}, nil); err == nil {
		t.Error("--older-than 30m: accepted; want refused")
	}
	total := func() int {
		return f.count(`SELECT (SELECT count(*) FROM control_core.runs) + (SELECT count(*) FROM control_core.attempts)
			+ (SELECT count(*) FROM control_core.run_events) + (SELECT count(*) FROM control_core.dispatch_offers)
			+ (SELECT count(*) FROM control_core.run_leases)`)
	}
	rows := total()
	dry, err := f.pub.PruneRuns(ctx, admin.PruneRequest{Project: "p", OlderThan: time.Hour, Batch: 10, DryRun: true}, nil)
	if err != nil || dry.Runs != 2 || total() != rows {
		t.Errorf("dry run: %+v, %v, rows %d → %d; want 2 Runs counted, nothing deleted", dry, err, rows, total())
	}
	var batches []int64
	res, err := f.pub.PruneRuns(ctx, admin.PruneRequest{Project: "p", OlderThan: time.Hour, Batch: 1},
		func(p admin.Pruned) { batches = append(batches, p.Runs) })
	if err != nil || res.Runs != 2 || res.Batches != 2 || res.Attempts != 2 || res.Offers != 1 || res.Leases != 1 || res.Events != 6 {
		t.Fatalf("prune: %+v, %v; want 2 Runs in 2 batches with 2 attempts, 6 events, 1 offer, 1 lease", res, err)
	}
	if fmt.Sprint(batches) != "[1 2]" {
		t.Errorf("progress %v, want [1 2]", batches)
	}
	for id, want := range map[uuid.UUID]int{old1: 0, old2: 0, young: 1, live: 1, stillRunning: 1, leased: 1} {
		if n := f.count(`SELECT count(*) FROM control_core.runs WHERE run_id = $1`, id); n != want {
			t.Errorf("run %s: %d rows, want %d", id, n, want)
		}
		if n := f.count(`SELECT count(*) FROM control_core.attempts WHERE run_id = $1`, id); n != want {
			t.Errorf("run %s: %d attempts, want %d", id, n, want)
		}
	}
	if n := f.count(`SELECT count(*) FROM control_core.admin_audit_log WHERE action = 'run.prune' AND project_id = 'p'`); n != 2 {
		t.Errorf("%d run.prune audit rows, want one per batch (2)", n)
	}
}
