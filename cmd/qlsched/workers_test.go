package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/dispatch"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// The issue 32 admin commands refuse bad input with exit 2, naming the flag, before connecting.
func TestDispatchAdminBadInputExits2BeforeConnecting(t *testing.T) {
	t.Parallel()
	task := []string{"task", "publish", "--project", "p", "--task", "k", "--executor-spec", "{}"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"worker", "token", "create", "--name", "Bad Name"}, "--name: "},
		{[]string{"worker", "token", "create"}, "--name: "},
		{[]string{"worker", "token", "revoke"}, "--id: "},
		{[]string{"worker", "token", "revoke", "--id", "nope"}, `--id "nope": not a UUID`},
		{[]string{"worker", "token", "revoke", "--name", "a", "--id", "0b9f5f4e-8c1a-4c3e-9d52-3a8f0c6e2b11"}, "--id: "},
		{[]string{"workers", "list", "--limit", "0"}, "--limit: 0 is out of range"},
		{[]string{"runs", "cancel", "not-a-uuid"}, `RUN_ID "not-a-uuid": not a UUID`},
		{[]string{"runs", "cancel"}, "runs cancel takes one RUN_ID"},
		{[]string{"runs", "cancel", "0b9f5f4e-8c1a-4c3e-9d52-3a8f0c6e2b11", "--reason", strings.Repeat("x", 257)}, "--reason: "},
		{append(task, "--max-attempts", "101"), "--max-attempts: 101 is out of range"},
		{append(task, "--max-attempts", "0"), "--max-attempts: 0 is out of range"},
		{append(task, "--max-attempts", "2", "--retry-backoff", "25h"), "--retry-backoff: "},
		{append(task, "--retry-backoff", "5s"), "--retry-backoff: 5s without retries"},
		{append(task, "--worker-label", "GPU=x"), "--worker-label: "},
		{append(task, "--worker-label", "gpu"), "--worker-label: "},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			t.Parallel()
			exits2BeforeConnecting(t, c.args, c.want)
		})
	}
}

// A worker token is printed once, on stdout (the text form: the token alone, so a script can
// capture it; the warning on stderr); nothing else any command prints holds the token or its
// hash: not its stderr, not token list or revoke, in text or JSON, not at debug log level.
func TestWorkerTokenIsShownOnceAndNeverAgain(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	url := []string{"--database-url", d.URL("ql_admin"), "--log-level", "debug"}
	created := run(t, append([]string{"worker", "token", "create", "--name", "fleet"}, url...)...)
	token := strings.TrimSuffix(created.stdout, "\n")
	if created.code != 0 || !dispatch.WellFormed(token, dispatch.WorkerTokenPrefix) || !strings.Contains(created.stderr, "shown once") {
		t.Fatalf("create: exit %d, stdout %q, stderr %q; want the token alone on stdout and the warning on stderr", created.code, created.stdout, created.stderr)
	}
	js := run(t, append([]string{"worker", "token", "create", "--name", "fleet", "--format", "json"}, url...)...)
	var doc struct {
		Schema, Token, ID, Name string
	}
	if err := json.Unmarshal([]byte(js.stdout), &doc); err != nil || js.code != 0 || doc.Schema != "qlsched.worker-token-create/v1" ||
		!dispatch.WellFormed(doc.Token, dispatch.WorkerTokenPrefix) || doc.Name != "fleet" || doc.ID == "" || doc.Token == token {
		t.Fatalf("create --format json: exit %d, %q, %v; want a document with a new token, id and name", js.code, js.stdout, err)
	}
	secrets := []string{token, dispatch.HashToken(token), doc.Token, dispatch.HashToken(doc.Token)}
	outputs := []string{created.stderr, js.stderr}
	for _, args := range [][]string{
		{"worker", "token", "list"}, {"worker", "token", "list", "--format", "json"},
		{"worker", "token", "revoke", "--name", "fleet"}, {"worker", "token", "revoke", "--name", "fleet", "--format", "json"},
		{"worker", "token", "list"},
	} {
		r := run(t, append(args, url...)...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
		outputs = append(outputs, r.stdout, r.stderr)
	}
	for _, out := range outputs {
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Fatalf("a token or its hash in an output other than create's stdout:\n%s", out)
			}
		}
	}
	if r := run(t, append([]string{"workers", "list"}, url...)...); r.code != 0 || !strings.Contains(r.stdout, "SESSION") || !strings.Contains(r.stdout, "(no sessions)") {
		t.Errorf("workers list: exit %d, %q; want the header and no sessions", r.code, r.stdout)
	}
	if !strings.Contains(outputs[6], "2 revoked") || !strings.Contains(outputs[8], `"revoked": []`) {
		t.Errorf("revoke: %q then %q; want 2 revoked, then none (idempotent)", outputs[6], outputs[8])
	}
}

// runs cancel: a queued Run is cancelled (from queued); again it is "already cancelled" with exit
// 0; an unknown Run exits 1.
func TestRunsCancel(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	url := []string{"--database-url", d.URL("ql_admin")}
	for _, args := range [][]string{
		{"project", "create", "--project", "p"},
		{"task", "publish", "--project", "p", "--task", "k", "--executor-spec", `{"image":"x"}`},
	} {
		if r := run(t, append(args, url...)...); r.code != 0 {
			t.Fatalf("%v: exit %d\n%s", args, r.code, r.stderr)
		}
	}
	const runID = "0b9f5f4e-8c1a-4c3e-9d52-3a8f0c6e2b11"
	d.Exec(t, fmt.Sprintf(`
		INSERT INTO control_core.runs (run_id, project_id, task_id, task_revision, execution_revision_id, trigger_id,
		        trigger_revision, scheduled_for_ms, idempotency_key, state, owner, queued_at_ms, created_at_ms, updated_at_ms)
		SELECT '%[1]s'::uuid, 'p', 'k', 1, kr.execution_revision_id, NULL, NULL, NULL, 'manual:1', 'queued', 'runtime', 100050, 100050, 100050
		FROM control_core.task_revisions kr WHERE kr.project_id = 'p' AND kr.task_id = 'k' AND kr.revision = 1;
		INSERT INTO control_core.attempts (attempt_id, run_id, attempt_no, executor_kind, state, created_at_ms, updated_at_ms)
		VALUES (gen_random_uuid(), '%[1]s'::uuid, 1, 'remote_worker', 'claimed', 100050, 100050)`, runID))
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"runs", "cancel", runID, "--reason", "bad input"}, 0, "cancelled (was queued)"},
		{[]string{"runs", "cancel", runID}, 0, "already cancelled"},
		{[]string{"runs", "cancel", runID, "--format", "json"}, 0, `"already": true`},
		{[]string{"runs", "cancel", "6f1c1e0a-0000-4000-8000-000000000000"}, 1, "not found"},
	} {
		r := run(t, append(c.args, url...)...)
		if r.code != c.code || !strings.Contains(r.stdout+r.stderr, c.want) {
			t.Errorf("%v: exit %d, %q %q; want exit %d mentioning %q", c.args, r.code, r.stdout, r.stderr, c.code, c.want)
		}
	}
}

// A token whose one showing failed (stdout a full disk, or a pipe nobody reads) is never left
// live: the command exits nonzero, says the token was revoked, and token list shows it revoked;
// in text and in JSON. (A text output once ignored the write error and exited 0 with the token
// lost and live; a closed pipe once killed the command with SIGPIPE before it could revoke.)
func TestATokenNobodySawIsRevoked(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	url := d.URL("ql_admin")
	sinks := map[string]func() (*os.File, error){
		"a full disk": func() (*os.File, error) { return os.OpenFile("/dev/full", os.O_WRONLY, 0) },
		"a closed pipe": func() (*os.File, error) {
			r, w, err := os.Pipe()
			if err == nil {
				err = r.Close()
			}
			return w, err
		},
	}
	created := 0
	for sink, open := range sinks {
		for _, format := range []string{"text", "json"} {
			out, err := open()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(qlsched(t), "worker", "token", "create", "--name", fmt.Sprintf("lost-%d", created), "--format", format, "--database-url", url)
			created++
			var stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = out, &stderr
			err = cmd.Run()
			out.Close()
			if err == nil || !strings.Contains(stderr.String(), "never shown, so it was revoked") {
				t.Errorf("%s into %s: %v, stderr %q; want a nonzero exit saying the token was revoked", format, sink, err, stderr.String())
			}
			if strings.Contains(stderr.String(), "shown once") {
				t.Errorf("%s into %s: stderr says the token was shown: %q", format, sink, stderr.String())
			}
		}
	}
	list := run(t, "worker", "token", "list", "--format", "json", "--database-url", url)
	var doc struct {
		Tokens []struct {
			Name        string `json:"name"`
			RevokedAtMs *int64 `json:"revoked_at_ms"`
		} `json:"tokens"`
	}
	if err := json.Unmarshal([]byte(list.stdout), &doc); err != nil || len(doc.Tokens) != created {
		t.Fatalf("token list: %v, %q; want the %d tokens", err, list.stdout, created)
	}
	for _, tk := range doc.Tokens {
		if tk.RevokedAtMs == nil {
			t.Errorf("token %s is live though nobody ever saw it", tk.Name)
		}
	}
}
