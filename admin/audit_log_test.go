package admin_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/qlcontrol/controlcore/admin"
)

// auditRows are the audit rows written after mark (an audit_id set of the rows before), as
// "action subject actor" lines in time order, read as the superuser.
func (f *fixture) auditRows(before map[string]bool) []string {
	f.t.Helper()
	rows, err := f.d.Pool(f.t, "").Query(context.Background(), `SELECT audit_id::text, action || ' ' || subject || ' ' || actor
		FROM control_core.admin_audit_log ORDER BY at_ms, action, subject`)
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var id, line string
		if err := rows.Scan(&id, &line); err != nil {
			f.t.Fatal(err)
		}
		if !before[id] {
			out = append(out, line)
		}
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	return out
}

// auditMark is the set of audit rows now, for auditRows.
func (f *fixture) auditMark() map[string]bool {
	f.t.Helper()
	rows, err := f.d.Pool(f.t, "").Query(context.Background(), `SELECT audit_id::text FROM control_core.admin_audit_log`)
	if err != nil {
		f.t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		f.t.Fatal(err)
	}
	m := map[string]bool{}
	for _, id := range ids {
		m[id] = true
	}
	return m
}

func isDenied(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.InsufficientPrivilege
}

// The admin role cannot write the audit log by hand (pg-0019): no INSERT, UPDATE or DELETE on it,
// no EXECUTE of the triggers' writer, and no write of a schedule row but through reset_schedule,
// which refuses a row its trigger's head has not left.
func TestAdminCannotWriteTheAuditLogByHand(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.pub.PublishTrigger(ctx, spec("p", "tick", "task", "0 * * * *")); err != nil {
		t.Fatal(err)
	}
	adminPool := f.d.Pool(t, "ql_admin")
	mark := f.auditMark()
	for _, sql := range []string{
		`INSERT INTO control_core.admin_audit_log (audit_id, action, project_id, subject)
		 VALUES (gen_random_uuid(), 'project.lock', 'p', 'forged')`,
		`UPDATE control_core.admin_audit_log SET subject = 'forged'`,
		`DELETE FROM control_core.admin_audit_log`,
		`SELECT control_core.audit_write('project.lock', 'p', 'forged', '{}')`,
		`INSERT INTO control_core.trigger_schedules (project_id, trigger_id, trigger_revision, state_version, claim_version, updated_at_ms)
		 VALUES ('p', 'tick', 1, 1, 0, 1)`,
		`UPDATE control_core.trigger_schedules SET next_fire_at_ms = 0`,
	} {
		if _, err := adminPool.Exec(ctx, sql); !isDenied(err) {
			t.Errorf("as ql_admin: %s\n  err %v, want permission denied", strings.Join(strings.Fields(sql), " "), err)
		}
	}
	var pgErr *pgconn.PgError
	if _, err := adminPool.Exec(ctx, `SELECT control_core.reset_schedule('p', 'tick')`); !errors.As(err, &pgErr) ||
		pgErr.Code != pgerrcode.ObjectNotInPrerequisiteState {
		t.Errorf("reset_schedule of a row at its head: err %v, want object_not_in_prerequisite_state", err)
	}
	if rows := f.auditRows(mark); len(rows) != 0 {
		t.Errorf("refused writes left audit rows %q", rows)
	}
}

// Every change the admin role can make by plain SQL leaves exactly its one audit row, written
// by the database with the session user as actor: one case per table the admin role may write
// (the catalog's list must equal the cases'), the publisher's own write pattern included (a head
// moved with its revision is one publish row, not two).
func TestPlainSQLChangesLeaveTheirAuditRow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.pub.PublishTask(ctx, admin.TaskSpec{Project: "p", Task: "task", ExecutorSpec: []byte(`{"image":"example/job:2"}`)}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"0 * * * *", "5 * * * *"} { // trigger tick at revision 2
		if _, err := f.pub.PublishTrigger(ctx, spec("p", "tick", "task", c)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.pub.CreateProject(ctx, "paused"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pub.PauseProject(ctx, "paused"); err != nil {
		t.Fatal(err)
	}
	f.d.Exec(t, `INSERT INTO control_core.plugin_packages (package_id, display_name) VALUES ('pk', 'Package');
		INSERT INTO control_core.plugin_package_versions (package_id, version, manifest, digest, state)
		VALUES ('pk', '1.0.0', '{}', repeat('a', 64), 'published'), ('pk', '1.0.1', '{}', repeat('b', 64), 'published');
		INSERT INTO control_core.project_plugin_bindings (project_id, package_id, version) VALUES ('p', 'pk', '1.0.0')`)

	cases := []struct {
		name, table string
		sql         string
		want        []string // "action subject" of each row it must leave, in time order
	}{
		{"a project inserted", "projects",
			`INSERT INTO control_core.projects (project_id, content_digest) VALUES ('q', control_core.project_digest('q', 'active', 1))`,
			[]string{"project.create q"}},
		{"a project paused", "projects",
			`UPDATE control_core.projects SET state = 'paused', revision = revision + 1,
			        content_digest = control_core.project_digest(project_id, 'paused', revision + 1) WHERE project_id = 'p'`,
			[]string{"project.pause p"}},
		{"a project resumed", "projects",
			`UPDATE control_core.projects SET state = 'active' WHERE project_id = 'paused'`, []string{"project.resume paused"}},
		{"a project's revision rewritten", "projects",
			`UPDATE control_core.projects SET revision = 7 WHERE project_id = 'p'`, []string{"project.update p"}},
		{"a task's head moved back", "tasks",
			`UPDATE control_core.tasks SET head_revision = 1 WHERE task_id = 'task'`, []string{"task.head task"}},
		{"a task created by hand, its revision with it", "tasks",
			`INSERT INTO control_core.tasks (project_id, task_id, head_revision, created_at_ms, updated_at_ms)
			 VALUES ('p', 'hand', 1, 1, 1);
			 INSERT INTO control_core.task_revisions (project_id, task_id, revision, execution_revision_id, content_digest)
			 SELECT 'p', 'hand', 1, execution_revision_id, repeat('c', 64) FROM control_core.execution_revisions LIMIT 1`,
			[]string{"task.publish hand"}},
		{"a task revision published by hand", "task_revisions",
			`UPDATE control_core.tasks SET head_revision = 3 WHERE task_id = 'task';
			 INSERT INTO control_core.task_revisions (project_id, task_id, revision, execution_revision_id, content_digest)
			 SELECT 'p', 'task', 3, execution_revision_id, repeat('c', 64) FROM control_core.execution_revisions LIMIT 1`,
			[]string{"task.publish task"}},
		{"an execution revision nothing pins", "execution_revisions",
			`INSERT INTO control_core.execution_revisions (execution_revision_id, project_id, executor_kind, spec, digest, created_at_ms)
			 VALUES ('00000000-0000-0000-0000-000000000001', 'p', 'remote_worker', '{"x":1}', repeat('d', 64), 1)`,
			[]string{"execution.publish 00000000-0000-0000-0000-000000000001"}},
		{"a trigger's head moved back", "triggers",
			`UPDATE control_core.triggers SET head_revision = 1 WHERE trigger_id = 'tick'`, []string{"trigger.head tick"}},
		{"a trigger revision published by hand", "trigger_revisions",
			`UPDATE control_core.triggers SET head_revision = 3 WHERE trigger_id = 'tick';
			 INSERT INTO control_core.trigger_revisions (project_id, trigger_id, revision, kind, cron_spec, timezone, misfire_policy,
			        misfire_grace_ms, enabled, task_id, task_revision, content_digest)
			 VALUES ('p', 'tick', 3, 'cron', '* * * * *', 'UTC', 'skip', 60000, true, 'task', 1, repeat('e', 64));
			 SELECT control_core.reset_schedule('p', 'tick')`,
			[]string{"trigger.publish tick"}},
		{"a package renamed", "plugin_packages",
			`UPDATE control_core.plugin_packages SET display_name = 'Other'`, []string{"plugin.package pk"}},
		{"a package version yanked", "plugin_package_versions",
			`UPDATE control_core.plugin_package_versions SET state = 'yanked' WHERE version = '1.0.0'`,
			[]string{"plugin.version pk@1.0.0"}},
		{"a package version published", "plugin_package_versions",
			`INSERT INTO control_core.plugin_package_versions (package_id, version, manifest, digest, state)
			 VALUES ('pk', '2.0.0', '{}', repeat('f', 64), 'published')`, []string{"plugin.publish pk@2.0.0"}},
		{"a binding moved", "project_plugin_bindings",
			`UPDATE control_core.project_plugin_bindings SET version = '1.0.1'`, []string{"plugin.bind pk"}},
		{"a binding removed", "project_plugin_bindings",
			`DELETE FROM control_core.project_plugin_bindings`, []string{"plugin.unbind pk"}},
		{"a worker token created", "worker_tokens",
			`INSERT INTO control_core.worker_tokens (worker_token_id, name, token_hash, created_at_ms)
			 VALUES ('00000000-0000-0000-0000-0000000000f1', 'fleet', repeat('a', 64), 1)`, []string{"worker_token.create fleet"}},
		{"a worker token revoked", "worker_tokens",
			`UPDATE control_core.worker_tokens SET revoked_at_ms = 1 WHERE name = 'fleet'`, []string{"worker_token.revoke fleet"}},
	}

	// Every table the admin role may change is a case: a grant added without its audit fails here.
	rows, err := f.d.Pool(t, "").Query(ctx, `SELECT c.relname::text FROM pg_class c
		WHERE c.relnamespace = 'control_core'::regnamespace AND c.relkind IN ('r', 'p')
		  AND has_table_privilege('ql_admin', c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE') ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	writable, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var covered []string
	for _, c := range cases {
		covered = append(covered, c.table)
	}
	slices.Sort(covered)
	if covered = slices.Compact(covered); !slices.Equal(writable, covered) {
		t.Errorf("tables ql_admin may write %v, the cases cover %v", writable, covered)
	}

	adminPool := f.d.Pool(t, "ql_admin")
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			mark := f.auditMark()
			if err := pgx.BeginFunc(ctx, adminPool, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, c.sql)
				return err
			}); err != nil {
				t.Fatalf("as ql_admin: %v", err)
			}
			var want []string
			for _, w := range c.want {
				want = append(want, w+" ql_admin")
			}
			if got := f.auditRows(mark); !slices.Equal(got, want) {
				t.Errorf("audit rows %q, want %q", got, want)
			}
		})
	}
}

// The reason a client gives (the transaction-local control_core.audit_reason) is detail, never
// identity: the actor and the time stay the database's.
func TestAuditReasonIsDetailNotIdentity(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, f.d.Pool(t, "ql_admin"), func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT set_config('control_core.audit_reason', 'somebody-else did it', true);
			SET LOCAL application_name = 'forged';
			UPDATE control_core.projects SET revision = 9 WHERE project_id = 'p'`)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var actor, reason string
	var ageMs int64
	if err := f.d.Pool(t, "").QueryRow(ctx, `SELECT actor, detail->>'reason', control_core.db_now_ms() - at_ms
		FROM control_core.admin_audit_log WHERE action = 'project.update'`).Scan(&actor, &reason, &ageMs); err != nil {
		t.Fatal(err)
	}
	if actor != "ql_admin" || reason != "somebody-else did it" || ageMs < 0 || ageMs > time.Minute.Milliseconds() {
		t.Errorf("actor %q, reason %q, %d ms old; want ql_admin, the reason as detail, the update's time", actor, reason, ageMs)
	}
}

// Each publisher command leaves exactly one audit row of its own beside the lock's, written by
// the database: none twice, none from the client.
func TestPublisherCommandsLeaveOneAuditRowEach(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	on := false
	for _, c := range []struct {
		name string
		run  func() error
		want []string
	}{
		{"project create", func() error { _, err := f.pub.CreateProject(ctx, "n"); return err }, []string{"project.create n"}},
		{"task publish", func() error {
			_, err := f.pub.PublishTask(ctx, admin.TaskSpec{Project: "p", Task: "task", ExecutorSpec: []byte(`{"image":"example/job:3"}`)})
			return err
		}, []string{"project.lock p", "task.publish task"}},
		{"trigger publish", func() error { _, err := f.pub.PublishTrigger(ctx, spec("p", "tick", "task", "0 * * * *")); return err },
			[]string{"project.lock p", "trigger.publish tick"}},
		{"unchanged trigger", func() error { _, err := f.pub.PublishTrigger(ctx, spec("p", "tick", "task", "0 * * * *")); return err }, nil},
		{"trigger disable", func() error {
			_, err := f.pub.ChangeTrigger(ctx, admin.TriggerChange{Project: "p", Trigger: "tick", Enabled: &on})
			return err
		}, []string{"project.lock p", "trigger.publish tick"}},
		{"project pause", func() error { _, err := f.pub.PauseProject(ctx, "p"); return err }, []string{"project.lock p", "project.pause p"}},
		{"project resume", func() error { _, err := f.pub.ResumeProject(ctx, "p"); return err }, []string{"project.lock p", "project.resume p"}},
	} {
		mark := f.auditMark()
		if err := c.run(); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := f.auditRows(mark)
		slices.Sort(got)
		var want []string
		for _, w := range c.want {
			want = append(want, w+" ql_admin")
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: audit rows %q, want %q", c.name, got, want)
		}
	}
	// the trigger.publish rows say what asked for them and what changed, as the publisher's did
	if n := f.count(`SELECT count(*) FROM control_core.admin_audit_log WHERE action = 'trigger.publish' AND subject = 'tick'
		AND ((detail->>'change' = 'publish' AND (detail->>'revision')::int = 1 AND jsonb_array_length(detail->'changed') = 7)
		  OR (detail->>'change' = 'publish' AND (detail->>'revision')::int = 2 AND detail->'changed' = '["enabled"]'
		      AND detail->>'enabled' = 'false'))`); n != 2 {
		t.Errorf("%d trigger.publish rows with their change, revision and changed fields, want 2", n)
	}
}
