package process_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/worker"
	"github.com/qlcontrol/controlcore/worker/process"
	"github.com/qlcontrol/controlcore/workerproto"
)

func job(t *testing.T, spec any) worker.Job {
	t.Helper()
	raw, ok := spec.(string)
	if !ok {
		b, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		raw = string(b)
	}
	return worker.Job{RunID: "run-1", AttemptID: "attempt-1", AttemptNo: 2, Project: "p", Task: "t", Spec: json.RawMessage(raw)}
}

func runSpec(t *testing.T, ctx context.Context, spec any) worker.Result {
	t.Helper()
	return process.New(process.Options{KillGrace: 500 * time.Millisecond})(ctx, job(t, spec))
}

func wantOutcome(t *testing.T, res worker.Result, outcome, kind string) {
	t.Helper()
	gotKind := ""
	if res.Error != nil {
		gotKind = res.Error.Kind
	}
	if res.Outcome != outcome || gotKind != kind {
		t.Fatalf("result = %s/%s (%+v), want %s/%s", res.Outcome, gotKind, res.Error, outcome, kind)
	}
}

func TestArgvIsNotAShell(t *testing.T) {
	dir := t.TempDir()
	marker := filepath.Join(dir, "injected")
	arg := "a; touch " + marker + " $HOME `id` | cat"
	res := runSpec(t, context.Background(), map[string]any{"command": []string{"echo", arg}})
	wantOutcome(t, res, workerproto.OutcomeSucceeded, "")
	if res.OutputTail != arg+"\n" {
		t.Fatalf("output = %q, want the argument literally: %q", res.OutputTail, arg+"\n")
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a shell ran the argument: %s exists (%v)", marker, err)
	}
}

func TestSpecErrors(t *testing.T) {
	cases := []struct {
		name, spec, kind, inMessage string
	}{
		{"missing program in PATH", `{"command":["no-such-program-ql32"]}`, workerproto.KindSpawn, "not found"},
		{"missing program path", `{"command":["/no/such/program"]}`, workerproto.KindSpawn, "no such file"},
		{"missing dir", `{"command":["true"],"dir":"/no/such/dir"}`, workerproto.KindSpawn, ""},
		{"bad timeout", `{"command":["true"],"timeout":"soon"}`, workerproto.KindBadSpec, `"timeout"`},
		{"negative timeout", `{"command":["true"],"timeout":"-1s"}`, workerproto.KindBadSpec, `"timeout"`},
		{"unknown field", `{"command":["true"],"timeuot":"1s"}`, workerproto.KindBadSpec, `"timeuot"`},
		{"empty command", `{"command":[]}`, workerproto.KindBadSpec, `"command"`},
		{"command not a list", `{"command":"echo hi"}`, workerproto.KindBadSpec, `command`},
		{"not JSON", `{"command":`, workerproto.KindBadSpec, "JSON"},
		{"bad env key", `{"command":["true"],"env":{"A=B":"x"}}`, workerproto.KindBadSpec, "env"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := runSpec(t, context.Background(), tc.spec)
			wantOutcome(t, res, workerproto.OutcomeFailed, tc.kind)
			if !strings.Contains(res.Error.Message, tc.inMessage) {
				t.Fatalf("message %q does not say %q", res.Error.Message, tc.inMessage)
			}
			if res.ExitCode != nil {
				t.Fatalf("exit code %d for a process that never ran", *res.ExitCode)
			}
		})
	}
}

func TestSpecMessagesDoNotQuoteSecrets(t *testing.T) {
	res := runSpec(t, context.Background(), `{"command":["/no/such/program-s3cr3t tok"],"timeout":"pass w0rd"}`)
	if strings.Contains(res.Error.Message, "w0rd") {
		t.Fatalf("message %q quotes the spec's value", res.Error.Message)
	}
	res = runSpec(t, context.Background(), `{"command":["/no/such/program s3cr3t"]}`)
	if strings.Contains(res.Error.Message, "s3cr3t") {
		t.Fatalf("message %q quotes the spec's program", res.Error.Message)
	}
}

func TestExitStatusAndSignal(t *testing.T) {
	res := runSpec(t, context.Background(), map[string]any{"command": []string{"sh", "-c", "echo out; echo err >&2; exit 3"}})
	wantOutcome(t, res, workerproto.OutcomeFailed, workerproto.KindExitStatus)
	if res.ExitCode == nil || *res.ExitCode != 3 || res.OutputTail != "out\nerr\n" {
		t.Fatalf("exit %v output %q, want 3 and both streams", res.ExitCode, res.OutputTail)
	}
	res = runSpec(t, context.Background(), map[string]any{"command": []string{"sh", "-c", "kill -SEGV $$"}})
	wantOutcome(t, res, workerproto.OutcomeFailed, workerproto.KindExitStatus)
	if res.Signal != "SIGSEGV" || res.ExitCode != nil {
		t.Fatalf("signal %q exit %v, want SIGSEGV and no exit code", res.Signal, res.ExitCode)
	}
}

func TestEnvAndDirAreHonoured(t *testing.T) {
	dir := t.TempDir()
	res := runSpec(t, context.Background(), map[string]any{
		"command": []string{"sh", "-c", `printf '%s|%s|%s|' "$FOO" "$QL_RUN_ID" "$QL_ATTEMPT_NO"; pwd`},
		"env":     map[string]string{"FOO": "bar baz"},
		"dir":     dir,
	})
	wantOutcome(t, res, workerproto.OutcomeSucceeded, "")
	real, _ := filepath.EvalSymlinks(dir)
	if want := "bar baz|run-1|2|" + real + "\n"; res.OutputTail != want {
		t.Fatalf("output = %q, want %q", res.OutputTail, want)
	}
}

func TestTailKeepsTheLast8KiB(t *testing.T) {
	// 20,000 bytes: a head of "H", then "t", then a marker at the very end.
	script := `i=0; while [ $i -lt 100 ]; do printf 'HHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHHH'; i=$((i+1)); done;` +
		` i=0; while [ $i -lt 99 ]; do printf 'tttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttttt'; i=$((i+1)); done; printf END`
	res := runSpec(t, context.Background(), map[string]any{"command": []string{"sh", "-c", script}})
	wantOutcome(t, res, workerproto.OutcomeSucceeded, "")
	if len(res.OutputTail) != process.TailBytes || !res.OutputTruncated {
		t.Fatalf("tail of %d bytes (truncated %v), want %d and truncated", len(res.OutputTail), res.OutputTruncated, process.TailBytes)
	}
	if !strings.HasSuffix(res.OutputTail, "tttEND") || strings.Contains(res.OutputTail, "H") {
		t.Fatalf("tail starts %q … ends %q: want the end of the output, none of its head", res.OutputTail[:20], res.OutputTail[len(res.OutputTail)-20:])
	}
}

// alive reports whether pid is a live process (a zombie nobody reaped counts as dead).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// grandchildSpec starts a child of the child that ignores SIGTERM (so only the SIGKILL to the
// group ends it) and writes its pid to a file.
func grandchildSpec(t *testing.T, extra map[string]any) (map[string]any, string) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	spec := map[string]any{"command": []string{"sh", "-c", `trap '' TERM; sleep 20 & echo $! > "$1"; wait`, "sh", pidFile}}
	for k, v := range extra {
		spec[k] = v
	}
	return spec, pidFile
}

func readPid(t *testing.T, file string) int {
	t.Helper()
	var pid int
	eventually.NoError(t, 10*time.Second, "the grandchild's pid", func() error {
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err
	})
	return pid
}

func TestTimeoutKillsTheProcessGroup(t *testing.T) {
	spec, pidFile := grandchildSpec(t, map[string]any{"timeout": "300ms"})
	start := time.Now()
	res := runSpec(t, context.Background(), spec)
	took := time.Since(start)
	wantOutcome(t, res, workerproto.OutcomeFailed, workerproto.KindTimeout)
	pid := readPid(t, pidFile)
	eventually.True(t, 5*time.Second, "the grandchild to be dead", func() bool { return !alive(pid) })
	if took > 5*time.Second {
		t.Fatalf("the timed-out job took %v, want about timeout + kill grace", took)
	}
}

func TestCancelKillsTheProcessGroup(t *testing.T) {
	spec, pidFile := grandchildSpec(t, nil)
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan worker.Result, 1)
	go func() { done <- runSpec(t, ctx, spec) }()
	pid := readPid(t, pidFile)
	if !alive(pid) {
		t.Fatal("the grandchild is not running before the cancel")
	}
	cancel(worker.ErrCancelled)
	var res worker.Result
	select {
	case res = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not return after the cancel")
	}
	wantOutcome(t, res, workerproto.OutcomeFailed, workerproto.KindCancelled)
	if res.Signal != "SIGKILL" {
		t.Fatalf("signal = %q, want SIGKILL (the child ignores SIGTERM)", res.Signal)
	}
	eventually.True(t, 5*time.Second, "the grandchild to be dead", func() bool { return !alive(pid) })
}

// A job that exits leaving a child behind (a daemon, a forgotten "&") does not leave it running:
// it would run on without a lease.
func TestStrayChildrenDieWithTheJob(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	res := runSpec(t, context.Background(), map[string]any{"command": []string{"sh", "-c", `sleep 20 > /dev/null 2>&1 & echo $! > "$1"`, "sh", pidFile}})
	wantOutcome(t, res, workerproto.OutcomeSucceeded, "")
	pid := readPid(t, pidFile)
	eventually.True(t, 5*time.Second, "the stray child to be dead", func() bool { return !alive(pid) })
}
