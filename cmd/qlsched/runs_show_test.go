package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/dispatch"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// runs show tells a Run's story after the loop took it through a failed Attempt (its output
// holding a terminal escape) and a retry that succeeded: text with both Attempts, their exit
// status, output and error, the offers and the timeline cut as asked with a "… N more" line;
// JSON whose every key docs/json.md names; no secret in either; bad input exits 2 before
// connecting, an unknown Run exits 1.
func TestRunsShowTellsTheStory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.New(t)
	pub := admin.NewPublisher(d.Handle(t, "ql_admin"))
	if _, err := pub.CreateProject(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	noBackoff := time.Duration(0)
	if _, err := pub.PublishTask(ctx, admin.TaskSpec{Project: "p", Task: "k", MaxAttempts: 2, RetryBackoff: &noBackoff,
		ExecutorSpec: []byte(`{"command":["sh","-c","echo SPEC-SECRET-VALUE"]}`)}); err != nil {
		t.Fatal(err)
	}
	tok, err := pub.CreateWorkerToken(ctx, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	runID := uuid.New()
	d.Exec(t, fmt.Sprintf(`
		INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id,
		        idempotency_key, state, owner, queued_at_ms, created_at_ms, updated_at_ms)
		SELECT '%[1]s'::uuid, 'p', 'k', 1, kr.execution_revision_id, 'manual:%[1]s', 'queued', 'runtime',
		       control_core.db_now_ms(), control_core.db_now_ms(), control_core.db_now_ms()
		FROM control_core.task_revisions kr WHERE kr.project_id = 'p' AND kr.task_id = 'k' AND kr.revision = 1;
		INSERT INTO control_core.attempts (attempt_id, run_id, attempt_no, executor_kind, state, created_at_ms, updated_at_ms)
		VALUES (gen_random_uuid(), '%[1]s'::uuid, 1, 'remote_worker', 'claimed', control_core.db_now_ms(), control_core.db_now_ms());
		INSERT INTO control_core.run_events (event_id, run_id, seq, type, at_ms, detail)
		VALUES (gen_random_uuid(), '%[1]s'::uuid, 1, 'run.created', control_core.db_now_ms(), '{}'),
		       (gen_random_uuid(), '%[1]s'::uuid, 2, 'run.queued', control_core.db_now_ms(), '{}')`, runID))

	// the loop, by the dispatch store's own transitions
	cred := dispatch.CredentialFor(tok.Token)
	store := dispatch.NewStore(d.Handle(t, "ql_runtime"), dispatch.Config{OfferTTL: time.Minute, LeaseTTL: time.Minute})
	s, err := store.Register(ctx, cred, dispatch.Registration{Name: "w1", Capacity: 1, Protocol: 1})
	if err != nil {
		t.Fatal(err)
	}
	var callbacks []string
	attempt := func(rep dispatch.Report) {
		t.Helper()
		cands, _, err := store.Candidates(ctx, dispatch.CandidateQuery{SessionID: s.ID, Slots: 1})
		if err != nil {
			t.Fatal(err)
		}
		offers, err := store.Offer(ctx, cred, s.ID, cands)
		if err != nil || len(offers) != 1 {
			t.Fatalf("offer: %d, %v; want 1", len(offers), err)
		}
		o := offers[0]
		callbacks = append(callbacks, o.CallbackToken)
		l, err := store.Ack(ctx, cred, o.OfferID, s.ID, o.CallbackToken)
		if err != nil {
			t.Fatal(err)
		}
		rep.SessionID, rep.CallbackToken, rep.LeaseVersion = s.ID, o.CallbackToken, l.LeaseVersion
		if _, err := store.Complete(ctx, cred, o.AttemptID, rep); err != nil {
			t.Fatal(err)
		}
	}
	exit3, exit0 := 3, 0
	attempt(dispatch.Report{Outcome: dispatch.OutcomeFailed, ExitCode: &exit3, ErrorKind: "exit_status", ErrorMessage: "exit status 3",
		OutputTail: "\x1b[31mred\x1b[0m\nboom\n", DurationMs: 41})
	attempt(dispatch.Report{Outcome: dispatch.OutcomeSucceeded, ExitCode: &exit0, OutputTail: "done\n", DurationMs: 7})

	conn := []string{"--database-url", d.URL("ql_admin")}
	secrets := map[string]string{"worker token": tok.Token, "worker token hash": cred.TokenHash, "executor spec": "SPEC-SECRET-VALUE"}
	for i, cb := range callbacks {
		secrets[fmt.Sprintf("callback token %d", i+1)] = cb
		secrets[fmt.Sprintf("callback token hash %d", i+1)] = dispatch.HashToken(cb)
	}

	text := run(t, append([]string{"runs", "show", runID.String(), "--offers", "1", "--events", "3"}, conn...)...)
	if text.code != 0 {
		t.Fatalf("runs show: exit %d\n%s%s", text.code, text.stdout, text.stderr)
	}
	spaces := regexp.MustCompile(` {2,}`) // the columns' padding follows the widest cell
	flat := spaces.ReplaceAllString(text.stdout, " ")
	for _, want := range []string{
		"state succeeded", "retry policy at most 2 attempts, backoff 0s doubling",
		"attempt 1 failed on w1 (token fleet)", "outcome failed, exit status 3, ran 0.041s",
		"error exit_status: exit status 3", " │ \uFFFD[31mred\uFFFD[0m\n │ boom\n",
		"attempt 2 succeeded on w1 (token fleet)", "lease version 2, released", " │ done\n",
		"offers: 2\n… 1 more (earlier) not shown; raise --offers\n",
		"timeline: 8 events\n… 5 more (seq 1 … 5) not shown; raise --events\n",
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("runs show text lacks %q:\n%s", want, text.stdout)
		}
	}
	if strings.Contains(text.stdout, "\x1b") {
		t.Errorf("runs show text passes a terminal escape through:\n%q", text.stdout)
	}
	if got := regexp.MustCompile(`(?m)^\d+\s+\S+\s+\+\S+\s+(run\.\w+)`).FindAllStringSubmatch(text.stdout, -1); len(got) != 3 ||
		got[0][1] != "run.dispatching" || got[2][1] != "run.succeeded" {
		t.Errorf("timeline %v; want the newest 3 events, run.dispatching … run.succeeded", got)
	}
	// the times after admission are milliseconds at a fixed width: three decimals of seconds, so
	// the column lines up (time.Duration's String printed "+12ms", "+1.2s", "+1.234s")
	if got := regexp.MustCompile(`(?m)^\d+\s+\S+\s+(\+\d+\.\d{3}s)\s+run\.\w+`).FindAllStringSubmatch(text.stdout, -1); len(got) != 3 {
		t.Errorf("timeline offsets %v; want 3 of the form +S.mmms\n%s", got, text.stdout)
	}

	doc := jsonDoc(t, "qlsched.runs-show/v1", append([]string{"runs", "show", runID.String()}, conn...)...)
	attempts, _ := doc["attempts"].([]any)
	offers, _ := doc["offers"].([]any)
	if len(attempts) != 2 || len(offers) != 2 || doc["offers_total"] != 2.0 || doc["events_total"] != 8.0 || doc["state"] != "succeeded" {
		t.Fatalf("runs show JSON: %v; want 2 attempts, 2 offers, 8 events", doc)
	}
	first := attempts[0].(map[string]any)
	res, _ := first["result"].(map[string]any)
	lease, _ := first["lease"].(map[string]any)
	if res["exit_code"] != 3.0 || res["output_tail"] != "\x1b[31mred\x1b[0m\nboom\n" || lease["lease_version"] != 1.0 ||
		first["error"].(map[string]any)["kind"] != "exit_status" {
		t.Errorf("attempt 1 in JSON: %v; want exit 3, the tail as recorded, lease version 1, error exit_status", first)
	}

	// the contract: every key of the document, at any depth (an event's detail is the event's
	// own), is one docs/json.md names in the section of qlsched.runs-show/v1
	md, err := os.ReadFile("../../docs/json.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(md)
	section = section[strings.Index(section, "### `qlsched.runs-show/v1`"):]
	section = section[:strings.Index(section[4:], "\n### ")+4]
	documented := map[string]bool{"schema": true}
	for _, m := range regexp.MustCompile("[`\"]([a-z_]+)[`\"]").FindAllStringSubmatch(section, -1) {
		documented[m[1]] = true
	}
	var undocumented []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				if !documented[k] {
					undocumented = append(undocumented, path+"."+k)
				}
				if k != "detail" {
					walk(path+"."+k, c)
				}
			}
		case []any:
			for _, c := range x {
				walk(path+"[]", c)
			}
		}
	}
	walk("", doc)
	sort.Strings(undocumented)
	if len(undocumented) > 0 {
		t.Errorf("keys of qlsched.runs-show/v1 that docs/json.md does not name: %v", undocumented)
	}
	for _, out := range []string{text.stdout, fmt.Sprint(doc)} {
		for name, secret := range secrets {
			if strings.Contains(out, secret) {
				t.Errorf("runs show prints the %s", name)
			}
		}
	}

	// bad input exits 2 before connecting (the URL names no server); an unknown Run exits 1
	nowhere := []string{"--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"}
	for _, args := range [][]string{{"runs", "show", "not-a-uuid"}, {"runs", "show", uuid.Nil.String()},
		{"runs", "show", runID.String(), "--offers", "0"}, {"runs", "show", runID.String(), "--events", "1001"}, {"runs", "show"}} {
		if r := run(t, append(args, nowhere...)...); r.code != 2 || r.stdout != "" {
			t.Errorf("%v: exit %d, stdout %q; want 2 and nothing\n%s", args, r.code, r.stdout, r.stderr)
		}
	}
	unknown := uuid.New().String()
	if r := run(t, append([]string{"runs", "show", unknown}, conn...)...); r.code != 1 || !strings.Contains(r.stderr, unknown+": not found") {
		t.Errorf("unknown Run: exit %d, stderr %q; want 1 and not found", r.code, r.stderr)
	}
}
