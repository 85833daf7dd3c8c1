package dispatch_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/schedule"
)

// A Run queued by `qlsched trigger run-now` (pg-0025's run_now: a manual Run with its claimed
// Attempt) is placed by the dispatcher like any queued Run: one offer, of the trigger's task
// revision, as a manual Run (no trigger, no occurrence).
func TestARunNowRunIsPlacedLikeAnyQueuedRun(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	ctx := context.Background()
	if _, err := f.pub.PublishTrigger(ctx, admin.TriggerSpec{Project: "p", Trigger: "nightly", Task: "task",
		Cron: "0 3 * * *", TimeZone: "UTC", Misfire: schedule.MisfireSkip, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	res, err := f.pub.RunNow(ctx, "p", "nightly", uuid.Nil, "")
	if err != nil {
		t.Fatal(err)
	}
	c := f.token("fleet")
	s := f.session(c, 2, nil)
	offers := f.place(c, s, 2)
	if len(offers) != 1 || offers[0].RunID != res.RunID || offers[0].TriggerID != "" || offers[0].ScheduledForMs != nil ||
		offers[0].TaskID != "task" || offers[0].TaskRevision != 1 {
		t.Fatalf("offers %+v; want the run-now Run %s, manual, of task revision 1", offers, res.RunID)
	}
	if st := f.state(res.RunID); st != "dispatching/dispatching/offered/-/3/0" {
		t.Errorf("run state %q after the offer, want dispatching/dispatching/offered/-/3/0 (Run, Attempt, offer, lease, events, leases)", st)
	}
}
