package coordinator

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// An item's claimed task (the key of the admit's task set) must be its trigger revision's: one
// that is not is refused, alone and in a batch whose other item names the right task (where the
// set holds that task), and diagnosed as a revision that changed since the claim.
func TestAdmitRefusesAClaimedTaskOtherThanTheTriggerRevisions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprint("batch=", batch), func(t *testing.T) {
			t.Parallel()
			_, s := dueFixture(t, 2*time.Second, "a", "b")
			claims := claimAll(t, s, "replica", 30*time.Second, 2)
			its := items(claims, 60_000)
			forged := *claims[0]
			forged.TaskID, forged.TaskRevision = "nosuchtask", 7
			its[0].Claim = &forged
			if !batch {
				its = its[:1]
			}
			res := s.AdmitBatch(ctx, its, 3)
			if res[0].Outcome != Stale || res[0].Err != nil {
				t.Errorf("a claimed task other than the trigger revision's: %q, %v; want stale", res[0].Outcome, res[0].Err)
			}
			if batch && (res[1].Outcome != Written || res[1].Err != nil) {
				t.Errorf("intact neighbour: %q, %v; want written", res[1].Outcome, res[1].Err)
			}
		})
	}
}
