package dispatch_test

import (
	"context"
	"testing"

	"github.com/qlcontrol/controlcore/admin"
)

// Found by a hostile review (issue 32): DispatchCandidates took the scan_cap (64) oldest ready
// Runs of a project before it filtered by the session's labels and by "never offered to this
// session", so 64 Runs a session may not take hid every younger Run of the project from it, for
// ever: the younger Runs stayed queued while the session polled with free capacity.

// 64 label-incompatible Runs ahead of a compatible one.
func TestRunsASessionMayNotTakeHideNothingBehindThem(t *testing.T) {
	f := newFx(t)
	f.policy("p", 1, 0, `{"gpu":"true"}`)
	f.queue("p", 64) // need gpu
	if _, err := f.pub.PublishTask(context.Background(), admin.TaskSpec{Project: "p", Task: "task",
		ExecutorSpec: []byte(`{"image":"example/job:2"}`)}); err != nil {
		t.Fatal(err)
	}
	plain := f.queue("p", 1)[0] // the head revision: no selector
	// queue() dates Runs 100 s back: make this one the youngest without doubt.
	f.exec(`UPDATE control_core.runs SET queued_at_ms = control_core.db_now_ms() WHERE run_id = $1`, plain)
	c := f.token("w")
	s := f.session(c, 1, nil)
	if got := f.place(c, s, 1); len(got) != 1 || got[0].RunID != plain {
		t.Errorf("an idle session without labels was offered %+v; want the one Run it may take (%s), "+
			"hidden behind 64 Runs that need gpu", got, plain)
	}
}

// A session that rejected 64 Runs is never offered the project's 65th.
func TestRejectedRunsHideNothingBehindThem(t *testing.T) {
	f := newFx(t)
	runs := f.queue("p", 65)
	c := f.token("w")
	s := f.session(c, 1, nil)
	for i := 0; i < 64; i++ {
		got := f.place(c, s, 1)
		if len(got) != 1 {
			t.Fatalf("placement %d: %+v", i, got)
		}
		if err := f.store.Reject(bg, c, got[0].OfferID, s.ID, got[0].CallbackToken, "no room"); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.place(c, s, 1); len(got) != 1 || got[0].RunID != runs[64] {
		t.Errorf("after 64 rejects the session was offered %+v; want the 65th Run %s", got, runs[64])
	}
}
