package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/app/cli"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// tickProject is appended to the example: an every-second trigger, so that occurrences come due
// while the test runs, in the database's time. Its task has a retry policy and a selector (pg-0022):
// the replica's admission re-verifies the revision's 7-argument digest, so a digest the publisher
// computed otherwise would admit nothing.
const tickProject = `
  - id: tick
    tasks:
      - id: beat
        executor_spec: {image: "tick/beat:1"}
        max_attempts: 3
        retry_backoff: 2s
        worker_labels: {zone: a}
    triggers:
      - id: every-second
        task: beat
        cron: "* * * * * *"
        misfire: fire_once
`

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// The README's round trip, with the binaries, on a real database, while a replica runs
// throughout: apply the example, check = 0, edit the file, check = 1 with the plan, apply, check =
// 0. The replica admits every occurrence exactly once, and the trigger the edit did not touch is
// never republished: its cursor, and so its sequence of occurrences, carry on across both applies.
func TestApplyRoundTripWithAReplicaRunning(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	example, err := os.ReadFile("../../examples/schedules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "schedules.yaml")
	text := string(example) + tickProject
	writeFile(t, file, text)
	adminURL, runtimeURL := d.URL("ql_admin"), d.URL("ql_runtime")

	rep := startReplica(t, qlsched(t), "--database-url", runtimeURL, "--http-addr", "127.0.0.1:0", "--cadence", "100ms", "--owner", "apply-1")
	rep.waitFor(t, 30*time.Second, "the replica running", func(l string) bool { return strings.Contains(l, "replica running") })
	go func() {
		for range rep.lines { // keep the replica's stderr flowing; stop drains the rest
		}
	}()

	r := run(t, "apply", "-f", file, "--database-url", adminURL)
	if r.code != 0 || !strings.Contains(r.stdout, "applied in one transaction (12 created, 0 updated, 0 disabled, 0 unchanged)") {
		t.Fatalf("first apply: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout, "billing/invoice:1.4") {
		t.Errorf("the plan shows an executor spec:\n%s", r.stdout)
	}
	// a check needs only SELECT: the runtime role's credentials do
	if r := run(t, "apply", "-f", file, "--check", "--database-url", runtimeURL); r.code != 0 || !strings.Contains(r.stdout, "the database equals the file") {
		t.Fatalf("check after apply: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	runs := func() int {
		var n int
		if err := d.Pool(t, "").QueryRow(context.Background(), `SELECT count(*) FROM control_core.runs WHERE trigger_id = 'every-second'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	eventually.True(t, 30*time.Second, "2 admitted occurrences of every-second", func() bool { return runs() >= 2 })

	edited := strings.Replace(text, `cron: "30 2 * * *"`, `cron: "45 2 * * *"`, 1)
	edited = strings.Replace(edited, "image: billing/invoice:1.4", "image: billing/invoice:1.5", 1)
	writeFile(t, file, edited)
	r = run(t, "apply", "-f", file, "--check", "--database-url", runtimeURL)
	for _, want := range []string{
		`trigger  billing  nightly-dunning        update     -    cron "30 2 * * *" → "45 2 * * *"`,
		`task     billing  invoice                update     -    executor_spec sha256:`,
		`trigger  billing  monthly-invoices       update     -    task_revision 1 → 2`,
		`trigger  tick     every-second           unchanged  1    -`,
		"the database differs (0 to create, 3 to update, 0 to disable, 9 unchanged); nothing written (--check)",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("check of the edit lacks %q", want)
		}
	}
	if r.code != 1 || !strings.Contains(r.stderr, "the database differs from "+file) || strings.Contains(r.stdout, "invoice:1.5") {
		t.Fatalf("check of the edit: exit %d, want 1 with the plan\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = run(t, "apply", "-f", file, "--check", "--format", "json", "--database-url", runtimeURL)
	var plan map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil || r.code != 1 || plan["schema"] != "qlsched.apply-plan/v1" || plan["in_sync"] != false {
		t.Fatalf("check --format json: exit %d, %v\n%s", r.code, err, r.stdout)
	}
	assertSnakeCase(t, plan)

	if r := run(t, "apply", "-f", file, "--database-url", adminURL); r.code != 0 || !strings.Contains(r.stdout, "(0 created, 3 updated, 0 disabled, 9 unchanged)") {
		t.Fatalf("apply of the edit: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := run(t, "apply", "-f", file, "--check", "--database-url", runtimeURL); r.code != 0 {
		t.Fatalf("check after applying the edit: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	after := runs()
	eventually.True(t, 30*time.Second, "2 more occurrences of every-second after the second apply", func() bool { return runs() >= after+2 })
	if code := rep.stop(t); code != 0 {
		t.Errorf("replica exit %d after SIGTERM:\n%s", code, rep.all.String())
	}

	var total, occurrences, misshapen, offGrid, otherRevision, publishes int
	err = d.Pool(t, "").QueryRow(context.Background(), `
		SELECT count(*), count(DISTINCT r.scheduled_for_ms),
		       count(*) FILTER (WHERE (SELECT count(*) FROM control_core.attempts a WHERE a.run_id = r.run_id) <> 1
		                           OR (SELECT count(*) FROM control_core.run_events e WHERE e.run_id = r.run_id) <> 2),
		       count(*) FILTER (WHERE r.scheduled_for_ms % 1000 <> 0),
		       count(*) FILTER (WHERE r.trigger_revision <> 1),
		       (SELECT count(*) FROM control_core.admin_audit_log WHERE action = 'trigger.publish' AND subject = 'every-second')
		FROM control_core.runs r WHERE r.trigger_id = 'every-second'`).Scan(&total, &occurrences, &misshapen, &offGrid, &otherRevision, &publishes)
	if err != nil {
		t.Fatal(err)
	}
	if total != occurrences || misshapen != 0 || offGrid != 0 || otherRevision != 0 || publishes != 1 {
		t.Errorf("every-second: %d runs for %d occurrences, %d without 1 Attempt and 2 Events, %d off the second, %d of another revision, "+
			"%d publishes; want one Run per occurrence, all of revision 1, published once", total, occurrences, misshapen, offGrid, otherRevision, publishes)
	}
}

var snakeKey = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// assertSnakeCase checks every key of a JSON document.
func assertSnakeCase(t *testing.T, v any) {
	t.Helper()
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if !snakeKey.MatchString(k) {
				t.Errorf("JSON key %q is not snake_case", k)
			}
			assertSnakeCase(t, e)
		}
	case []any:
		for _, e := range x {
			assertSnakeCase(t, e)
		}
	}
}

// A FIFO, a device or a folder is refused at once (a FIFO with no writer blocked the read, and
// the process ignored Ctrl-C and SIGTERM).
func TestApplyRefusesAFileThatIsNotRegular(t *testing.T) {
	t.Parallel()
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{fifo, "/dev/zero", t.TempDir()} {
		url, accepted := unusedDatabase(t)
		r := run(t, "apply", "-f", f, "--check", "--database-url", url)
		if r.code != 2 || !strings.Contains(r.stderr, "not a regular file") || accepted() != 0 {
			t.Errorf("-f %s: exit %d, stderr %q, %d connections; want exit 2, not a regular file, none", f, r.code, r.stderr, accepted())
		}
	}
}

// apply -f - stops on Ctrl-C while it waits for standard input (a pipe whose writer stays open),
// exit 130, without connecting.
func TestApplyFromStdinStopsOnInterrupt(t *testing.T) {
	t.Parallel()
	url, accepted := unusedDatabase(t)
	cmd := exec.Command(qlsched(t), "apply", "-f", "-", "--check", "--database-url", url)
	stdin, err := cmd.StdinPipe() // kept open: the read never ends by itself
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill() }()
	// the signal must come after the handler is set up: wait until a thread blocks reading the pipe
	eventually.True(t, 10*time.Second, "apply blocked reading standard input", func() bool {
		wchans, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/wchan", cmd.Process.Pid))
		for _, w := range wchans {
			if b, _ := os.ReadFile(w); strings.Contains(string(b), "pipe") {
				return true
			}
		}
		return false
	})
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("apply -f - still running 10 s after SIGINT")
	}
	if code := cmd.ProcessState.ExitCode(); code != cli.ExitInterrupted || !strings.Contains(stderr.String(), "interrupted") || accepted() != 0 {
		t.Errorf("exit %d, stderr %q, %d connections; want %d, interrupted, none", code, stderr.String(), accepted(), cli.ExitInterrupted)
	}
}

// A bad file is bad usage: every fault as FILE:LINE: FIELD: PROBLEM on stderr, exit 2, and no
// connection opened; the executor spec is never shown.
func TestApplyBadFileExits2BeforeConnecting(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "bad.yaml")
	writeFile(t, file, `schema: qlsched.schedules/v1
projects:
  - id: billing
    tasks:
      - id: invoice
        executor_spec: {token: "s3cr3t-never-shown", at: .nan}
    triggers:
      - id: nightly
        task: invoice
        cron: "0 3 * * *"
        timezone: Europe/Berlinn
        misfire: fire-once
        priority: high
`)
	for _, extra := range [][]string{nil, {"--check"}, {"--prune", "--format", "json"}} {
		url, accepted := unusedDatabase(t)
		r := run(t, append([]string{"apply", "-f", file, "--database-url", url}, extra...)...)
		want := []string{
			file + ":6: projects[billing].tasks[invoice].executor_spec: a number JSON cannot represent",
			file + ":11: projects[billing].triggers[nightly].timezone: ",
			file + ":12: projects[billing].triggers[nightly].misfire: ",
			file + ":13: projects[billing].triggers[nightly].priority: unknown field",
			"qlsched: " + file + ": 4 error(s); nothing was sent to the database",
		}
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if r.code != 2 || len(lines) != len(want) || r.stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr:\n%s\nwant exit 2 and %d lines", extra, r.code, r.stdout, r.stderr, len(want))
		}
		for i, w := range want {
			if i < len(lines) && !strings.HasPrefix(lines[i], w) {
				t.Errorf("%v: line %d %q, want it to start with %q", extra, i+1, lines[i], w)
			}
		}
		if n := accepted(); n != 0 || strings.Contains(r.stderr, "s3cr3t") {
			t.Errorf("%v: %d connection(s), or the spec shown; want none", extra, n)
		}
	}
	if r := run(t, "apply", "--database-url", "postgres://u@127.0.0.1:1/x"); r.code != 2 || !strings.Contains(r.stderr, "-f/--file is required") {
		t.Errorf("apply without -f: exit %d, %q", r.code, r.stderr)
	}
}
