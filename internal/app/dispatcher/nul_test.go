package dispatcher_test

import (
	"net/http"
	"testing"

	"github.com/qlcontrol/controlcore/workerproto"
)

// Found by a hostile review (issue 32): a NUL in a report is valid UTF-8 that jsonb cannot store
// (22P05). Answered 503 ("retry"), qlworker retried until the lease expired and the Run ran again.
// A value the database refuses is bad input (400), never retryable; qlworker itself never sends
// a NUL (worker.TailUTF8).
func TestANULInAReportIsRefusedNotRetryable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	sid := f.register(t, 2).SessionID

	o := f.pollOne(t, sid)
	f.ack(t, sid, o)
	rep := completion(sid, o, 1, workerproto.OutcomeSucceeded)
	rep.OutputTail = "ok\x00done"
	if a := f.do(t, f.token, "POST", workerproto.CompletePath(o.AttemptID), rep); a.status != http.StatusBadRequest {
		t.Errorf("complete with a NUL in output_tail: %d %s; want 400, never a retryable 503", a.status, a.body)
	}

	o2 := f.pollOne(t, sid)
	a := f.do(t, f.token, "POST", workerproto.RejectPath(o2.OfferID),
		workerproto.RejectRequest{SessionID: sid, CallbackToken: o2.CallbackToken, Reason: "a\x00b"})
	if a.status != http.StatusBadRequest {
		t.Errorf("reject with a NUL in reason: %d %s; want 400, never a retryable 503", a.status, a.body)
	}
}
