package process_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
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

// TestMain lets this test binary be the job supervisor, as qlworker is.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == process.SupervisorCommand {
		os.Exit(process.Supervise(os.Args[2:]))
	}
	os.Exit(m.Run())
}

var supervisor = []string{"/proc/self/exe", process.SupervisorCommand}

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
	return process.New(process.Options{KillGrace: 500 * time.Millisecond, Supervisor: supervisor})(ctx, job(t, spec))
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
		{"unknown field", `{"command":["true"],"timeuot":"1s"}`, workerproto.KindBadSpec, `unknown field`},
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

// secret is distinctive: none of its 4-byte pieces occurs in a message by chance.
const secret = "Zq9xK7wPv3Lm"

// leaks reports a 4-byte (or longer) piece of secret in text.
func leaks(text string) string {
	for i := 0; i+4 <= len(secret); i++ {
		if strings.Contains(text, secret[i:i+4]) {
			return secret[i : i+4]
		}
	}
	return ""
}

// No refusal quotes a spec's value, key or field name, not even in part: each field in turn
// holds the secret in a form that makes the job fail before it runs.
func TestSpecSecretsNeverInMessages(t *testing.T) {
	cases := []struct{ name, spec string }{
		{"program in PATH", `{"command":["` + secret + `"]}`},
		{"program path", `{"command":["/no/such/` + secret + `"]}`},
		{"program relative", `{"command":["./` + secret + `"],"dir":"/"}`},
		{"program not executable", `{"command":["/etc/hostname"],"env":{"X":"` + secret + `"}}`},
		{"program is a dir", `{"command":["/tmp/"],"env":{"X":"` + secret + `"}}`},
		{"program with a space", `{"command":["no such ` + secret + `"]}`},
		{"arg with a NUL", `{"command":["true","` + secret + `\u0000"]}`},
		{"arg not a string", `{"command":["true",{"` + secret + `":1}]}`},
		{"dir missing", `{"command":["true"],"dir":"/no/such/` + secret + `"}`},
		{"dir a file", `{"command":["true"],"dir":"/etc/hostname/` + secret + `"}`},
		{"dir with a NUL", `{"command":["true"],"dir":"` + secret + `\u0000"}`},
		{"timeout word", `{"command":["true"],"timeout":"` + secret + `"}`},
		{"timeout number-ish", `{"command":["true"],"timeout":"9` + secret + `"}`},
		{"timeout negative", `{"command":["true"],"timeout":"-1s` + secret + `"}`},
		{"timeout not a string", `{"command":["true"],"timeout":{"` + secret + `":1}}`},
		{"env key with =", `{"command":["true"],"env":{"` + secret + `=x":"v"}}`},
		{"env value with a NUL", `{"command":["true"],"env":{"K":"` + secret + `\u0000"}}`},
		{"env value not a string", `{"command":["true"],"env":{"` + secret + `":7}}`},
		{"unknown field", `{"command":["true"],"` + secret + `":"` + secret + `"}`},
		{"two values", `{"command":["true"]} {"` + secret + `":1}`},
		{"bad JSON", `{"command":["true"],"env":{"` + secret + `"}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := runSpec(t, context.Background(), tc.spec)
			if res.Outcome != workerproto.OutcomeFailed || res.Error == nil {
				t.Fatalf("result %+v, want a failure", res)
			}
			if res.ExitCode != nil {
				t.Fatalf("exit code %d: the job ran", *res.ExitCode)
			}
			text := res.Error.Kind + " " + res.Error.Message + " " + res.OutputTail + " " + res.Signal
			if piece := leaks(text); piece != "" {
				t.Fatalf("%q holds %q, a piece of the spec's secret", text, piece)
			}
			if _, _, err := process.ParseSpec([]byte(tc.spec)); err != nil {
				if piece := leaks(err.Error()); piece != "" {
					t.Fatalf("ParseSpec: %q holds %q", err, piece)
				}
			}
		})
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
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // a failed test leaves nothing running
	return pid
}

func TestTimeoutKillsTheProcessGroup(t *testing.T) {
	spec, pidFile := grandchildSpec(t, map[string]any{"timeout": "1s"}) // time to start under load
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
	for _, sup := range [][]string{supervisor, nil} {
		t.Run(fmt.Sprintf("supervised=%v", sup != nil), func(t *testing.T) { testCancelKillsTheProcessGroup(t, sup) })
	}
}

func testCancelKillsTheProcessGroup(t *testing.T, sup []string) {
	spec, pidFile := grandchildSpec(t, nil)
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan worker.Result, 1)
	h := process.New(process.Options{KillGrace: 500 * time.Millisecond, Supervisor: sup})
	go func() { done <- h(ctx, job(t, spec)) }()
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

// A job that exits leaving behind a descendant outside its group (setsid), and that
// descendant's own child, leaves neither running: the supervisor's sweep finds them as its
// children (re-parented to it), not through the group kill.
func TestStraysOutsideTheGroupDieWithTheJob(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	res := runSpec(t, context.Background(), map[string]any{"command": []string{"sh", "-c",
		`setsid sh -c 'trap "" TERM; sleep 20 & echo $! > "$1"; wait' sh "$1" > /dev/null 2>&1 &
		 while [ ! -s "$1" ]; do sleep 0.01; done`, "sh", pidFile}})
	wantOutcome(t, res, workerproto.OutcomeSucceeded, "")
	pid := readPid(t, pidFile)
	eventually.True(t, 5*time.Second, "the stray's child in a session of its own to be dead", func() bool { return !alive(pid) })
}

// A zombie the supervisor holds when the job exits (an orphan re-parented to it that died) is
// reaped first by the sweep; a stray outside the group must still be found after it, and be gone,
// reaped, by the time the result is reported: the sweep does not end at the first child it reaps.
func TestStrayBehindAZombieDiesWithTheJob(t *testing.T) {
	dir := t.TempDir()
	pidFile, zombieFile := filepath.Join(dir, "pid"), filepath.Join(dir, "zombie")
	res := runSpec(t, context.Background(), map[string]any{"command": []string{"sh", "-c", `
		( sh -c 'echo $$ > "$1"' sh "$2" & )
		while [ ! -s "$2" ]; do sleep 0.01; done
		z=$(cat "$2")
		while [ "$(cut -d' ' -f3 /proc/$z/stat)" != Z ]; do sleep 0.01; done
		[ "$(cut -d' ' -f4 /proc/$z/stat)" = "$PPID" ] || { echo "the zombie is not the supervisor's"; exit 3; }
		setsid sh -c 'echo $$ > "$1"; exec sleep 20' sh "$1" > /dev/null 2>&1 &
		while [ ! -s "$1" ]; do sleep 0.01; done`, "sh", pidFile, zombieFile}})
	wantOutcome(t, res, workerproto.OutcomeSucceeded, "")
	pid := readPid(t, pidFile)
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("the stray outside the group (pid %d) is still there after the job's result (kill 0: %v)", pid, err)
	}
}

// A descendant that left the job's process group (setsid) is still the job's: the supervisor,
// its subreaper, kills it on timeout too.
func TestTimeoutKillsDescendantsOutsideTheGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	res := runSpec(t, context.Background(), map[string]any{"timeout": "1s",
		"command": []string{"sh", "-c", `setsid sh -c 'trap "" TERM; sleep 20' > /dev/null 2>&1 & echo $! > "$1"; wait`, "sh", pidFile}})
	wantOutcome(t, res, workerproto.OutcomeFailed, workerproto.KindTimeout)
	pid := readPid(t, pidFile)
	eventually.True(t, 5*time.Second, "the descendant in a session of its own to be dead", func() bool { return !alive(pid) })
}

// A stop sends SIGTERM to the whole group, not only to the program: its child may shut down
// cleanly too (it records the SIGTERM while the program waits for it; a child that got only
// the SIGKILL after the program's exit or the kill grace could not).
func TestStopSignalsTheWholeGroup(t *testing.T) {
	for _, sup := range [][]string{supervisor, nil} {
		t.Run(fmt.Sprintf("supervised=%v", sup != nil), func(t *testing.T) {
			dir := t.TempDir()
			ready, termed := filepath.Join(dir, "ready"), filepath.Join(dir, "termed")
			child := `trap 'echo term > "$2"; exit 0' TERM; echo up > "$1"; while :; do sleep 0.05; done`
			spec := map[string]any{"command": []string{"sh", "-c", `trap wait TERM; sh -c "$0" child "$1" "$2" & wait`, child, ready, termed}}
			ctx, cancel := context.WithCancelCause(context.Background())
			done := make(chan worker.Result, 1)
			h := process.New(process.Options{KillGrace: 2 * time.Second, Supervisor: sup})
			go func() { done <- h(ctx, job(t, spec)) }()
			eventually.NoError(t, 10*time.Second, "the child's trap to be set", func() error { _, err := os.Stat(ready); return err })
			cancel(worker.ErrCancelled)
			<-done
			if b, err := os.ReadFile(termed); err != nil || string(b) != "term\n" {
				t.Fatalf("the child got no SIGTERM (%q, %v)", b, err)
			}
		})
	}
}

// The kernel sends the Pdeathsig when the *thread* that forked a job exits, and the Go runtime
// ends a thread whose locked goroutine returns. Jobs are forked from a thread the worker keeps:
// goroutines that lock their thread and return while jobs run (ending their threads) kill none.
func TestThreadExitsDoNotKillJobs(t *testing.T) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // end threads, one after the other, as long as jobs start and run
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			ended := make(chan struct{})
			go func() { runtime.LockOSThread(); close(ended) }() // returns locked: its thread exits
			<-ended
		}
	}()
	defer func() { close(stop); <-done }()
	spec := map[string]any{"command": []string{"sleep", "0.3"}}
	for range 4 {
		results := make(chan worker.Result, 4)
		for range 4 {
			go func() { results <- runSpec(t, context.Background(), spec) }()
		}
		for range 4 {
			wantOutcome(t, <-results, workerproto.OutcomeSucceeded, "")
		}
	}
}
