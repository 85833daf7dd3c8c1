package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/dispatch"
)

// storyLoop is a project "story" whose task may take two Attempts, no backoff, a worker token and
// the dispatch store as the dispatcher runs it (ql_runtime): the state machine of docs/dispatch.md
// driven by its own functions.
type storyLoop struct {
	f     *fixture
	store *dispatch.Store
	cred  dispatch.Credential
	token string
}

func newStoryLoop(t *testing.T) *storyLoop {
	t.Helper()
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.pub.CreateProject(ctx, "story"); err != nil {
		t.Fatal(err)
	}
	noBackoff := time.Duration(0)
	if _, err := f.pub.PublishTask(ctx, admin.TaskSpec{Project: "story", Task: "task", MaxAttempts: 2, RetryBackoff: &noBackoff,
		ExecutorSpec: []byte(`{"command":["sh","-c","echo SPEC-SECRET-VALUE"]}`)}); err != nil {
		t.Fatal(err)
	}
	tok, err := f.pub.CreateWorkerToken(ctx, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	return &storyLoop{f: f, token: tok.Token, cred: dispatch.CredentialFor(tok.Token),
		store: dispatch.NewStore(f.d.Handle(t, "ql_runtime"), dispatch.Config{OfferTTL: time.Minute, LeaseTTL: time.Minute})}
}

// queue admits one queued Run of story/task revision 1 with its claimed Attempt 1, as the
// scheduler writes it (for trigger-less Runs: a manual key).
func (l *storyLoop) queue(t *testing.T) uuid.UUID {
	t.Helper()
	id := uuid.New()
	l.f.d.Exec(t, fmt.Sprintf(`
		INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id,
		        idempotency_key, state, owner, queued_at_ms, created_at_ms, updated_at_ms)
		SELECT '%[1]s'::uuid, 'story', 'task', 1, kr.execution_revision_id, 'manual:%[1]s', 'queued', 'runtime',
		       control_core.db_now_ms(), control_core.db_now_ms(), control_core.db_now_ms()
		FROM control_core.task_revisions kr WHERE kr.project_id = 'story' AND kr.task_id = 'task' AND kr.revision = 1;
		INSERT INTO control_core.attempts (attempt_id, run_id, attempt_no, executor_kind, state, created_at_ms, updated_at_ms)
		VALUES (gen_random_uuid(), '%[1]s'::uuid, 1, 'remote_worker', 'claimed', control_core.db_now_ms(), control_core.db_now_ms());
		INSERT INTO control_core.run_events (event_id, run_id, seq, type, at_ms, detail)
		VALUES (gen_random_uuid(), '%[1]s'::uuid, 1, 'run.created', control_core.db_now_ms(), '{}'),
		       (gen_random_uuid(), '%[1]s'::uuid, 2, 'run.queued', control_core.db_now_ms(), '{}')`, id))
	return id
}

func (l *storyLoop) session(t *testing.T, name string) dispatch.Session {
	t.Helper()
	s, err := l.store.Register(context.Background(), l.cred, dispatch.Registration{Name: name, Capacity: 1, Protocol: 1})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// offer is one placement pass for s; it wants exactly one offer.
func (l *storyLoop) offer(t *testing.T, s dispatch.Session) dispatch.Offer {
	t.Helper()
	ctx := context.Background()
	cands, _, err := l.store.Candidates(ctx, dispatch.CandidateQuery{SessionID: s.ID, Labels: s.Labels, Slots: 1})
	if err != nil {
		t.Fatal(err)
	}
	offers, err := l.store.Offer(ctx, l.cred, s.ID, cands)
	if err != nil || len(offers) != 1 {
		t.Fatalf("placement for %s: %d offers, %v; want 1", s.WorkerID, len(offers), err)
	}
	return offers[0]
}

// run ACKs o, heartbeats once and reports outcome.
func (l *storyLoop) run(t *testing.T, s dispatch.Session, o dispatch.Offer, rep dispatch.Report) dispatch.Completion {
	t.Helper()
	ctx := context.Background()
	lease, err := l.store.Ack(ctx, l.cred, o.OfferID, s.ID, o.CallbackToken)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.store.Heartbeat(ctx, l.cred, s.ID, []dispatch.LeaseRef{{AttemptID: o.AttemptID, LeaseVersion: lease.LeaseVersion}}); err != nil {
		t.Fatal(err)
	}
	rep.SessionID, rep.CallbackToken, rep.LeaseVersion = s.ID, o.CallbackToken, lease.LeaseVersion
	c, err := l.store.Complete(ctx, l.cred, o.AttemptID, rep)
	if err != nil && !(rep.Outcome == dispatch.OutcomeCancelled && c.RunState == "cancelled") {
		t.Fatalf("complete attempt %d: %+v, %v", o.AttemptNo, c, err)
	}
	return c
}

// A Run taken through reject → offer → ACK → failed attempt → retry → expired offer → ACK →
// success: the story holds both Attempts with their worker, lease version, times, exit status,
// output tail and error, every offer with its answer, the newest events within the limit and
// the counts of all; no secret is in it.
func TestRunStoryTellsOfferAckFailRetrySuccess(t *testing.T) {
	t.Parallel()
	l := newStoryLoop(t)
	ctx := context.Background()
	run := l.queue(t)
	picky, good := l.session(t, "w-picky"), l.session(t, "w-good")

	o1 := l.offer(t, picky)
	if err := l.store.Reject(ctx, l.cred, o1.OfferID, picky.ID, o1.CallbackToken, "no docker here"); err != nil {
		t.Fatal(err)
	}
	// offers are ordered by time within an Attempt: keep the two of attempt 1 a second apart
	l.f.d.Exec(t, `UPDATE control_core.dispatch_offers SET offered_at_ms = offered_at_ms - 1000 WHERE offer_id = $1`, o1.OfferID)
	o2 := l.offer(t, good)
	exit3 := 3
	if c := l.run(t, good, o2, dispatch.Report{Outcome: dispatch.OutcomeFailed, ExitCode: &exit3, ErrorKind: "exit_status",
		ErrorMessage: "exit status 3", OutputTail: "first\nsecond\n", DurationMs: 41}); c.RunState != "queued" {
		t.Fatalf("attempt 1 failed: run %s; want queued for its retry", c.RunState)
	}
	o3 := l.offer(t, picky) // attempt 2 may go to the session that rejected attempt 1
	l.f.d.Exec(t, `UPDATE control_core.dispatch_offers SET offered_at_ms = control_core.db_now_ms() - 2,
		expires_at_ms = control_core.db_now_ms() - 1 WHERE offer_id = $1`, o3.OfferID)
	if n, err := l.store.ExpireOffers(ctx, 16); err != nil || n != 1 {
		t.Fatalf("ExpireOffers: %d, %v; want 1", n, err)
	}
	o4 := l.offer(t, good)
	exit0 := 0
	if c := l.run(t, good, o4, dispatch.Report{Outcome: dispatch.OutcomeSucceeded, ExitCode: &exit0, OutputTail: "done\n", DurationMs: 7}); c.RunState != "succeeded" {
		t.Fatalf("attempt 2: run %s; want succeeded", c.RunState)
	}

	r := admin.NewReader(l.f.d.Handle(t, "ql_admin"))
	s, err := r.RunStory(ctx, run, admin.StoryLimits{})
	if err != nil {
		t.Fatal(err)
	}
	if s.RunID != run || s.State != "succeeded" || s.FinishedAtMs == nil || s.MaxAttempts != 2 || s.LeaseVersion != 2 ||
		s.QueuedAtMs == nil || s.CreatedAtMs <= 0 || s.Owner != "runtime" {
		t.Errorf("run: %+v; want succeeded, finished, 2 attempts allowed, lease version 2", s)
	}
	if len(s.Attempts) != 2 {
		t.Fatalf("attempts %+v; want 2", s.Attempts)
	}
	a1, a2 := s.Attempts[0], s.Attempts[1]
	if a1.AttemptNo != 1 || a1.State != "failed" || a1.WorkerID == nil || *a1.WorkerID != "w-good" || a1.TokenName == nil || *a1.TokenName != "fleet" ||
		a1.Lease == nil || a1.Lease.LeaseVersion != 1 || a1.Lease.State != "released" || a1.Lease.EndedAtMs == nil ||
		a1.StartedAtMs == nil || a1.FinishedAtMs == nil || *a1.FinishedAtMs < *a1.StartedAtMs || a1.SessionHeartbeatAtMs == nil ||
		a1.Result == nil || a1.Result.Outcome != "failed" || a1.Result.ExitCode == nil || *a1.Result.ExitCode != 3 ||
		a1.Result.OutputTail != "first\nsecond\n" || a1.Result.DurationMs != 41 ||
		a1.Error == nil || a1.Error.Kind != "exit_status" || a1.Error.Message != "exit status 3" || a1.OfferID == nil || *a1.OfferID != o2.OfferID {
		t.Errorf("attempt 1: %+v lease %+v result %+v error %+v; want failed on w-good, lease v1 released, exit 3, its tail and error",
			a1, a1.Lease, a1.Result, a1.Error)
	}
	if a2.AttemptNo != 2 || a2.State != "succeeded" || *a2.WorkerID != "w-good" || a2.Lease == nil || a2.Lease.LeaseVersion != 2 ||
		a2.Result == nil || a2.Result.Outcome != "succeeded" || *a2.Result.ExitCode != 0 || a2.Result.OutputTail != "done\n" || a2.Error != nil ||
		*a2.OfferID != o4.OfferID {
		t.Errorf("attempt 2: %+v lease %+v result %+v error %+v; want succeeded on w-good, lease v2, exit 0, no error", a2, a2.Lease, a2.Result, a2.Error)
	}

	var offers []string
	for _, o := range s.Offers {
		offers = append(offers, fmt.Sprintf("%d:%s:%s:%v", o.AttemptNo, o.Worker, o.State, o.AnsweredAtMs != nil))
	}
	if got := strings.Join(offers, " "); s.OffersTotal != 4 ||
		got != "1:w-picky:rejected:true 1:w-good:acked:true 2:w-picky:expired:false 2:w-good:acked:true" ||
		s.Offers[0].OfferID != o1.OfferID || s.Offers[2].OfferID != o3.OfferID {
		t.Errorf("offers (%d): %s; want reject, ack, expired, ack in order", s.OffersTotal, got)
	}
	var events []string
	for _, e := range s.Events {
		events = append(events, e.Type)
	}
	const all = "run.created run.queued run.dispatching run.queued run.dispatching run.running run.queued run.dispatching run.queued run.dispatching run.running run.succeeded"
	if got := strings.Join(events, " "); got != all || s.EventsTotal != 12 {
		t.Errorf("events (%d): %s; want %s", s.EventsTotal, got, all)
	}

	// bounded: the newest offers and events, in order, and the counts of all
	cut, err := r.RunStory(ctx, run, admin.StoryLimits{Offers: 2, Events: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(cut.Offers) != 2 || cut.Offers[0].OfferID != o3.OfferID || cut.Offers[1].OfferID != o4.OfferID || cut.OffersTotal != 4 ||
		len(cut.Events) != 3 || cut.Events[0].Seq != 10 || cut.Events[2].Type != "run.succeeded" || cut.EventsTotal != 12 {
		t.Errorf("limited story: offers %+v (%d), events %+v (%d); want the newest 2 offers and the events 10 … 12", cut.Offers, cut.OffersTotal, cut.Events, cut.EventsTotal)
	}

	// no secret: neither token, nor hash, nor the executor spec
	doc, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for name, secret := range map[string]string{"worker token": l.token, "worker token hash": l.cred.TokenHash,
		"callback token": o2.CallbackToken, "callback token hash": dispatch.HashToken(o2.CallbackToken), "executor spec": "SPEC-SECRET-VALUE"} {
		if strings.Contains(string(doc), secret) {
			t.Errorf("the story holds the %s", name)
		}
	}
}

// A running Run cancelled by the admin: the story shows the cancel (time, event with its reason),
// the Attempt cancelled by its worker's report with the lease released.
func TestRunStoryOfACancelledRun(t *testing.T) {
	t.Parallel()
	l := newStoryLoop(t)
	ctx := context.Background()
	run := l.queue(t)
	w := l.session(t, "w1")
	o := l.offer(t, w)
	lease, err := l.store.Ack(ctx, l.cred, o.OfferID, w.ID, o.CallbackToken)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.f.pub.CancelRun(ctx, run, "bad input file"); err != nil {
		t.Fatal(err)
	}
	hb, err := l.store.Heartbeat(ctx, l.cred, w.ID, []dispatch.LeaseRef{{AttemptID: o.AttemptID, LeaseVersion: lease.LeaseVersion}})
	if err != nil || len(hb.Leases) != 1 || hb.Leases[0].Status != dispatch.LeaseCancel {
		t.Fatalf("heartbeat after the cancel: %+v, %v; want cancel", hb, err)
	}
	if _, err := l.store.Complete(ctx, l.cred, o.AttemptID, dispatch.Report{SessionID: w.ID, CallbackToken: o.CallbackToken,
		LeaseVersion: lease.LeaseVersion, Outcome: dispatch.OutcomeCancelled, OutputTail: "stopping\n"}); err != nil {
		t.Fatal(err)
	}

	s, err := admin.NewReader(l.f.d.Handle(t, "ql_admin")).RunStory(ctx, run, admin.StoryLimits{})
	if err != nil {
		t.Fatal(err)
	}
	if s.State != "cancelled" || s.CancelRequestedAtMs == nil || len(s.Attempts) != 1 || s.OffersTotal != 1 || s.Offers[0].State != "acked" {
		t.Fatalf("story %+v; want the cancelled Run with its one Attempt and its acked offer", s)
	}
	a := s.Attempts[0]
	if a.State != "cancelled" || a.Lease == nil || a.Lease.State != "released" || a.Result == nil || a.Result.Outcome != "cancelled" ||
		a.Result.OutputTail != "stopping\n" || a.Error == nil || a.Error.Kind != "cancelled" {
		t.Errorf("attempt %+v lease %+v result %+v error %+v; want cancelled by its worker, lease released", a, a.Lease, a.Result, a.Error)
	}
	last := s.Events[len(s.Events)-1]
	var detail struct{ From, Reason string }
	if err := json.Unmarshal(last.Detail, &detail); err != nil || last.Type != "run.cancelled" || detail.From != "running" || detail.Reason != "bad input file" {
		t.Errorf("last event %s %s; want run.cancelled from running with its reason", last.Type, last.Detail)
	}
}

// An unknown Run is ErrNotFound; the nil UUID and limits out of range are FieldErrors, refused
// before anything is read.
func TestRunStoryRefusesUnknownAndBadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := admin.NewReader(f.d.Handle(t, "ql_admin"))
	ctx := context.Background()
	if _, err := r.RunStory(ctx, uuid.New(), admin.StoryLimits{}); !errors.Is(err, admin.ErrNotFound) {
		t.Errorf("unknown run: %v; want ErrNotFound", err)
	}
	var fe *admin.FieldError
	for _, c := range []struct {
		id    uuid.UUID
		l     admin.StoryLimits
		field string
	}{{uuid.Nil, admin.StoryLimits{}, admin.FieldRun}, {uuid.New(), admin.StoryLimits{Offers: admin.MaxStoryList + 1}, admin.FieldOffers},
		{uuid.New(), admin.StoryLimits{Events: -1}, admin.FieldEvents}} {
		if _, err := r.RunStory(ctx, c.id, c.l); !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("RunStory(%s, %+v): %v; want a FieldError of %s", c.id, c.l, err, c.field)
		}
	}
}
