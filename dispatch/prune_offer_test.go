package dispatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/admin"
)

// Prune and a pending offer (review item: "prune deletes Runs that still have pending dispatch
// offers"). Prune takes only terminal Runs finished over an hour ago with no live Attempt and no
// active lease, and deletes their offers in the same statement as their Attempts (the two name
// each other): nothing dangles. The one way a terminal Run keeps an offer still 'offered' is a
// fail-closed (startup recovery fails the Run and its Attempt and leaves the offer): the worker's
// ACK of it is refused before the prune (the Run is not dispatching) and after it (the offer is
// gone), and no lease is ever granted. The test arranges the worst case, the offer unexpired.
func TestAPrunedRunsPendingOfferIsGoneAndItsAckRefused(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.project("p")
	c := f.token("w")
	s := f.session(c, 1, nil)
	run := f.queue("p", 1)[0]
	offers := f.place(c, s, 1)
	if len(offers) != 1 {
		t.Fatalf("placed %d offers, want 1", len(offers))
	}
	o := offers[0]
	// fail closed as startup recovery does (Attempt and Run failed, the offer left 'offered'),
	// finished three hours ago; the offer itself stays unexpired
	f.exec(`WITH a AS (UPDATE control_core.attempts SET state = 'failed', finished_at_ms = control_core.db_now_ms() - 10800000,
		             error = '{"reason":"startup_recovery_failed_closed"}' WHERE run_id = $1 RETURNING run_id)
		UPDATE control_core.runs SET state = 'failed', finished_at_ms = control_core.db_now_ms() - 10800000
		WHERE run_id IN (SELECT run_id FROM a)`, run)
	f.exec(`UPDATE control_core.dispatch_offers SET expires_at_ms = control_core.db_now_ms() + 600000 WHERE offer_id = $1`, o.OfferID)
	ctx := context.Background()
	if l, err := f.store.Ack(ctx, c, o.OfferID, s.ID, o.CallbackToken); err == nil {
		t.Fatalf("ACK of a failed Run's offer before the prune: %+v; want refused", l)
	} else {
		t.Logf("ACK before the prune: %v", err)
	}
	res, err := f.pub.PruneRuns(ctx, admin.PruneRequest{Project: "p", OlderThan: time.Hour, Batch: 10}, nil)
	if err != nil || res.Runs != 1 || res.Offers != 1 {
		t.Fatalf("prune: %+v, %v; want the Run and its offer deleted", res, err)
	}
	if n := f.count(`SELECT count(*) FROM control_core.dispatch_offers WHERE offer_id = $1`, o.OfferID); n != 0 {
		t.Errorf("%d offer rows left after the prune of their Run; want 0", n)
	}
	l, err := f.store.Ack(ctx, c, o.OfferID, s.ID, o.CallbackToken)
	if err == nil {
		t.Errorf("ACK of a pruned Run's offer: %+v; want refused", l)
	} else {
		t.Logf("ACK after the prune: %v", err)
	}
	if n := f.count(`SELECT (SELECT count(*) FROM control_core.run_leases) + (SELECT count(*) FROM control_core.runs)
		+ (SELECT count(*) FROM control_core.attempts)`); n != 0 {
		t.Errorf("%d lease, Run or Attempt rows after the ACK of a pruned Run's offer; want 0", n)
	}
}
