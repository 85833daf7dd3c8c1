package coordinator

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/schedule"
)

// The claimed task_id/task_revision are only keys of the task set: never compared with the
// trigger revision's. An item whose claimed task disagrees with its trigger revision's is then
// refused alone (with no diagnosis: ErrAdmitInvalid) but admitted in a batch whose other item
// names the right task. The old admit ignored the claimed task (and admitted it either way).
func TestReviewAdmitClaimedTaskMismatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprint("batch=", batch), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			for _, id := range []string{"a", "b"} {
				f.trigger(id, "* * * * *", schedule.MisfireSkip)
				f.setCursor(id, -2*time.Second)
			}
			s := NewStore(f.rt)
			claims := claimAll(t, s, "replica", 30*time.Second, 2)
			its := items(claims, 60_000)
			forged := *claims[0]
			forged.TaskID, forged.TaskRevision = "nosuchtask", 7
			its[0].Claim = &forged
			if !batch {
				its = its[:1]
			}
			res := s.AdmitBatch(ctx, its, 3)
			t.Logf("batch=%v: forged task id: outcome %q, err %v", batch, res[0].Outcome, res[0].Err)
			if batch && res[1].Outcome != Written {
				t.Errorf("intact neighbour: %s %v", res[1].Outcome, res[1].Err)
			}
			if res[0].Err != nil {
				t.Errorf("a refused item with no diagnosis: %v", res[0].Err)
			}
		})
	}
}
