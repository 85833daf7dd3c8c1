package admin_test

import (
	"context"
	"testing"

	"github.com/qlcontrol/controlcore/admin"
)

// The readers return this package's types with what the database holds: a trigger before its
// first claim has no cursor and no claim (nil, not zero), a Run admitted by a trigger carries it,
// and Status agrees with both.
func TestReadersReportWhatIsStored(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.pub.PublishTrigger(ctx, spec("p", "nightly", "task", "0 3 * * *")); err != nil {
		t.Fatal(err)
	}
	// last_scheduled_at_ms as the admit of the Run below writes it (status's last admissions read it)
	f.d.Exec(t, `UPDATE control_core.trigger_schedules SET next_fire_at_ms = 1000000, last_scheduled_at_ms = 100000, claim_owner = 'replica-x',
		claim_token = gen_random_uuid(), claim_version = claim_version + 1, updated_at_ms = control_core.db_now_ms(),
		claim_expires_at_ms = control_core.db_now_ms() + 600000 WHERE trigger_id = 'nightly'`)
	f.d.Exec(t, `INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id, trigger_id,
		        trigger_revision, scheduled_for_ms, idempotency_key, state, owner, queued_at_ms, created_at_ms, updated_at_ms)
		SELECT gen_random_uuid(), 'p', 'task', 1, kr.execution_revision_id, 'nightly', 1, 100000,
		       'ql3:cron:v1:nightly:1:100000', 'queued', 'runtime', 100050, 100050, 100050
		FROM control_core.task_revisions kr WHERE kr.project_id = 'p' AND kr.task_id = 'task' AND kr.revision = 1`)
	r := admin.NewReader(f.d.Handle(t, "ql_admin"))

	if _, err := f.pub.PublishTrigger(ctx, spec("p", "fresh", "task", "* * * * *")); err != nil {
		t.Fatal(err)
	}
	triggers, err := r.Triggers(ctx, admin.TriggerFilter{Project: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if len(triggers) != 2 || triggers[0].TriggerID != "fresh" || triggers[1].TriggerID != "nightly" {
		t.Fatalf("triggers %+v, want fresh and nightly", triggers)
	}
	fresh, nightly := triggers[0], triggers[1]
	if fresh.NextFireAtMs != nil || fresh.ClaimOwner != nil || fresh.ClaimExpiresAtMs != nil || fresh.TaskRevision != 1 {
		t.Errorf("fresh trigger %+v: want no cursor and no claim, task revision 1", fresh)
	}
	if nightly.NextFireAtMs == nil || *nightly.NextFireAtMs != 1000000 || nightly.ClaimOwner == nil || *nightly.ClaimOwner != "replica-x" ||
		nightly.ClaimExpiresAtMs == nil || *nightly.ClaimExpiresAtMs <= nightly.NowMs {
		t.Errorf("nightly trigger %+v: want cursor 1000000 and a live claim of replica-x", nightly)
	}

	runs, err := r.Runs(ctx, admin.RunFilter{Project: "p", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || runs[0].TriggerID == nil || *runs[0].TriggerID != "nightly" {
		t.Fatalf("runs %+v, want the one Run of nightly", runs)
	}
	if lag, ok := runs[0].LagMs(); !ok || lag != 50 {
		t.Errorf("lag %d (%v), want 50 ms", lag, ok)
	}

	st, err := r.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Projects) != 1 {
		t.Fatalf("status %+v, want project p", st)
	}
	p := st.Projects[0]
	if p.ProjectID != "p" || p.Triggers != 2 || p.LiveClaims != 1 || p.LastAdmitMs != 100050 ||
		len(p.LiveClaimsByOwner) != 1 || p.LiveClaimsByOwner[0] != (admin.OwnerClaims{Owner: "replica-x", Claims: 1}) ||
		len(p.LastAdmits) != 1 || p.LastAdmits[0].RunID != runs[0].RunID {
		t.Errorf("project status %+v: want 2 triggers, replica-x's live claim, the nightly Run as last admit", p)
	}
	if len(st.LiveClaimsByOwner) != 1 || st.LiveClaimsByOwner[0].Owner != "replica-x" || st.LiveClaimsByOwner[0].Claims != 1 {
		t.Errorf("live claims by owner %+v, want replica-x: 1", st.LiveClaimsByOwner)
	}
}

// A filter that could never match a stored row is refused as a field, before any query.
func TestReaderRefusesBadFilters(t *testing.T) {
	t.Parallel()
	r := admin.NewReader(nil)
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		call  func() error
		field string
	}{
		{"trigger project", func() error { _, err := r.Triggers(ctx, admin.TriggerFilter{Project: "P!"}); return err }, admin.FieldProject},
		{"runs trigger", func() error { _, err := r.Runs(ctx, admin.RunFilter{Trigger: "T T", Limit: 1}); return err }, admin.FieldTrigger},
		{"runs limit 0", func() error { _, err := r.Runs(ctx, admin.RunFilter{Limit: 0}); return err }, admin.FieldLimit},
		{"runs limit too big", func() error { _, err := r.Runs(ctx, admin.RunFilter{Limit: admin.MaxRunsLimit + 1}); return err }, admin.FieldLimit},
	} {
		if fe := fieldOf(c.call()); fe != c.field {
			t.Errorf("%s: field %q, want %q", c.name, fe, c.field)
		}
	}
}
