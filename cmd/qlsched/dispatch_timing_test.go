package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/testbin"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// An offer made late in a worker's long poll (the Run became ready after the poll was sent, more
// than --offer-ttl into it) is ACKed and run. The worker once timed its ACK from when the poll
// was sent, so such an offer was already "expired" in its hands: dropped unACKed, placed again
// into the next poll, late again, for ever (a hostile review's H1). The Run here becomes ready
// 2.5 s into the worker's first 5 s poll, with a 1 s offer TTL.
func TestAnOfferMadeLateInALongPollIsAckedAndRun(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	admin := []string{"--database-url", d.URL("ql_admin")}
	publish(t, admin, []string{"project", "create", "--project", "p"},
		[]string{"task", "publish", "--project", "p", "--task", "k", "--executor-spec", `{"command":["true"]}`})
	tok := run(t, append([]string{"worker", "token", "create", "--name", "late", "--format", "json"}, admin...)...)
	var created struct {
		Token string `json:"token"`
	}
	if tok.code != 0 || json.Unmarshal([]byte(tok.stdout), &created) != nil {
		t.Fatalf("worker token create: exit %d\n%s", tok.code, tok.stderr)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(created.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	disp := startProcess(t, qlsched(t), "dispatch", "--database-url", d.URL("ql_runtime"), "--listen", "127.0.0.1:0",
		"--http-addr", "127.0.0.1:0", "--offer-ttl", "1s", "--poll-max-wait", "5s")
	line := disp.waitFor(t, 60*time.Second, "dispatcher running", func(l string) bool { return listenLog.MatchString(l) })
	w := startProcess(t, testbin.Command(t, "qlworker"), "--dispatcher", listenLog.FindStringSubmatch(line)[1],
		"--token-file", tokenFile, "--name", "w", "--capacity", "1")
	w.waitFor(t, 60*time.Second, "session registered", func(l string) bool { return strings.Contains(l, "session registered") })

	// A queued Run whose ready time is 2.5 s from now: it is placed into the poll already waiting.
	su := d.Pool(t, "")
	ctx := context.Background()
	var runID string
	if err := su.QueryRow(ctx, `
		WITH obs AS (SELECT control_core.db_now_ms() AS now_ms),
		kr AS (SELECT kr.project_id, kr.task_id, kr.revision, kr.execution_revision_id FROM control_core.tasks t
		       JOIN control_core.task_revisions kr ON kr.project_id = t.project_id AND kr.task_id = t.task_id AND kr.revision = t.head_revision
		       WHERE t.project_id = 'p' AND t.task_id = 'k'),
		r AS (INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id, idempotency_key,
		             state, owner, retry_at_ms, queued_at_ms, created_at_ms, updated_at_ms)
		      SELECT gen_random_uuid(), kr.project_id, kr.task_id, kr.revision, kr.execution_revision_id, 'late-offer',
		             'queued', 'runtime', obs.now_ms + 2500, obs.now_ms, obs.now_ms, obs.now_ms FROM kr, obs RETURNING run_id),
		a AS (INSERT INTO control_core.attempts (attempt_id, run_id, attempt_no, executor_kind, state, created_at_ms, updated_at_ms)
		      SELECT gen_random_uuid(), r.run_id, 1, 'remote_worker', 'claimed', obs.now_ms, obs.now_ms FROM r, obs),
		e AS (INSERT INTO control_core.run_events (event_id, run_id, seq, type, at_ms)
		      SELECT gen_random_uuid(), r.run_id, x.seq, x.type, obs.now_ms FROM r, obs, (VALUES (1, 'run.created'), (2, 'run.queued')) x (seq, type))
		SELECT run_id::text FROM r`).Scan(&runID); err != nil {
		t.Fatal(err)
	}
	var state, events string
	eventually.NoError(t, 20*time.Second, "the Run to succeed", func() error {
		if err := su.QueryRow(ctx, `SELECT r.state, (SELECT string_agg(type || coalesce(':' || (detail ->> 'reason'), ''), ' ' ORDER BY seq)
			FROM control_core.run_events e WHERE e.run_id = r.run_id) FROM control_core.runs r WHERE r.run_id = $1`, runID).Scan(&state, &events); err != nil {
			return err
		}
		if state != "succeeded" {
			return fmt.Errorf("the Run is %s; events: %s", state, events)
		}
		return nil
	})
	if strings.Contains(events, "offer_expired") {
		t.Errorf("the offer expired before the idle worker ACKed it: %s", events)
	}
}
