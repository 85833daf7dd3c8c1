package process_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// never is a quiet period no test reaches: the pool is filled once, at start-up.
const never = time.Hour

func pooledHandler(t *testing.T, capacity int, quiet time.Duration) *process.Handler {
	t.Helper()
	h := process.NewHandlerQuiet(process.Options{KillGrace: 500 * time.Millisecond, Supervisor: supervisor, Capacity: capacity}, quiet)
	t.Cleanup(h.Close)
	return h
}

// waitIdle waits until the pool holds n live idle supervisors and returns their pids.
func waitIdle(t *testing.T, h *process.Handler, n int) []int {
	t.Helper()
	var pids []int
	eventually.True(t, 20*time.Second, strconv.Itoa(n)+" idle supervisors", func() bool {
		pids = h.IdlePids()
		if len(pids) != n {
			return false
		}
		for _, pid := range pids {
			if !alive(pid) {
				return false
			}
		}
		return true
	})
	return pids
}

// gone reports whether pid is neither running nor a zombie (it was reaped).
func gone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }

// A job handed to a pre-started supervisor runs as one started for it: argv, env, dir, exit
// status, signal, output tail, timeout, stop, strays, a bad dir; and the supervisor that ran it
// is the one the pool had started (the job's parent), whose argv and env never hold the job's env.
func TestPreStartedSupervisorRunsTheJob(t *testing.T) {
	type check func(t *testing.T, res worker.Result, sup int)
	cases := []struct {
		name          string
		outcome, kind string
		// job is the spec; during runs while the handler runs the job (nil: nothing), with the
		// job's cancel; after checks the result and what is left, with the supervisor's pid.
		job func(t *testing.T) (spec map[string]any, during func(t *testing.T, cancel func()), after check)
	}{
		{"argv, env and dir", workerproto.OutcomeSucceeded, "", func(t *testing.T) (map[string]any, func(*testing.T, func()), check) {
			dir := t.TempDir()
			arg := "a; b $HOME `id`"
			return map[string]any{
					"command": []string{"sh", "-c", `printf '%s|%s|%s|%s|' "$FOO" "$QL_RUN_ID" "$QL_ATTEMPT_NO" "$1"; pwd; echo "$PPID"`, "sh", arg},
					"env":     map[string]string{"FOO": "bar baz"}, "dir": dir,
				}, nil, func(t *testing.T, res worker.Result, sup int) {
					real, _ := filepath.EvalSymlinks(dir)
					if want := "bar baz|run-1|2|" + arg + "|" + real + "\n" + strconv.Itoa(sup) + "\n"; res.OutputTail != want {
						t.Fatalf("output = %q, want %q (the last line: the pre-started supervisor's pid)", res.OutputTail, want)
					}
				}
		}},
		{"the env in neither the supervisor's argv nor its env", workerproto.OutcomeSucceeded, "", func(t *testing.T) (map[string]any, func(*testing.T, func()), check) {
			seen := filepath.Join(t.TempDir(), "seen")
			return map[string]any{
					"command": []string{"sh", "-c", `printf %s "$QL_SECRET" > "$1"; tr '\0' '\n' < /proc/$PPID/cmdline; tr '\0' '\n' < /proc/$PPID/environ`, "sh", seen},
					"env":     map[string]string{"QL_SECRET": secret},
				}, nil, func(t *testing.T, res worker.Result, sup int) {
					if b, err := os.ReadFile(seen); err != nil || string(b) != secret {
						t.Fatalf("the job saw %q (%v), not its env's value", b, err)
					}
					if !strings.Contains(res.OutputTail, process.SupervisorCommand) {
						t.Fatalf("output %q: not the supervisor's argv", res.OutputTail)
					}
					if piece := leaks(res.OutputTail); piece != "" {
						t.Fatalf("the supervisor's argv or env holds %q of the job's env:\n%s", piece, res.OutputTail)
					}
				}
		}},
		{"exit status and both streams", workerproto.OutcomeFailed, workerproto.KindExitStatus, func(t *testing.T) (map[string]any, func(*testing.T, func()), check) {
			return map[string]any{"command": []string{"sh", "-c", "echo out; echo err >&2; exit 3"}}, nil, func(t *testing.T, res worker.Result, _ int) {
				if res.ExitCode == nil || *res.ExitCode != 3 || res.OutputTail != "out\nerr\n" {
					t.Fatalf("exit %v output %q, want 3 and both streams", res.ExitCode, res.OutputTail)
				}
			}
		}},
		{"killed by a signal", workerproto.OutcomeFailed, workerproto.KindExitStatus, func(t *testing.T) (map[string]any, func(*testing.T, func()), check) {
			return map[string]any{"command": []string{"sh", "-c", "kill -SEGV $$"}}, nil, func(t *testing.T, res worker.Result, _ int) {
				if res.Signal != "SIGSEGV" || res.ExitCode != nil {
					t.Fatalf("signal %q exit %v, want SIGSEGV and no exit code", res.Signal, res.ExitCode)
				}
			}
		}},
		{"the output's tail", workerproto.OutcomeSucceeded, "", func(t *testing.T) (map[string]any, func(*testing.T, func()), check) {
			return map[string]any{"command": []string{"sh", "-c", `head -c 20000 /dev/zero | tr '\0' H; head -c 9000 /dev/zero | tr '\0' t; printf END`}}, nil,
				func(t *testing.T, res worker.Result, _ int) {
					if len(res.OutputTail) != process.TailBytes || !res.OutputTruncated || !strings.HasSuffix(res.OutputTail, "tttEND") || strings.Contains(res.OutputTail, "H") {
						t.Fatalf("tail of %d bytes (truncated %v): want the last %d bytes", len(res.OutputTail), res.OutputTruncated, process.TailBytes)
					}
				}
		}},
		{"timeout", workerproto.OutcomeFailed, workerproto.KindTimeout, func(t *testing.T) (map[string]any, func(*testing.T, func()), check) {
			spec, pidFile := grandchildSpec(t, map[string]any{"timeout": "1s"})
			return spec, nil, func(t *testing.T, _ worker.Result, _ int) {
				pid := readPid(t, pidFile)
				eventually.True(t, 5*time.Second, "the grandchild to be dead", func() bool { return !alive(pid) })
			}
		}},
		{"stop", workerproto.OutcomeFailed, workerproto.KindCancelled, func(t *testing.T) (map[string]any, func(*testing.T, func()), check) {
			spec, pidFile := grandchildSpec(t, nil)
			var pid int
			return spec, func(t *testing.T, cancel func()) {
					pid = readPid(t, pidFile)
					cancel()
				}, func(t *testing.T, res worker.Result, _ int) {
					if res.Signal != "SIGKILL" {
						t.Fatalf("signal = %q, want SIGKILL (the job ignores SIGTERM)", res.Signal)
					}
					eventually.True(t, 5*time.Second, "the grandchild to be dead", func() bool { return !alive(pid) })
				}
		}},
		{"strays die", workerproto.OutcomeSucceeded, "", func(t *testing.T) (map[string]any, func(*testing.T, func()), check) {
			pidFile := filepath.Join(t.TempDir(), "pid")
			return map[string]any{"command": []string{"sh", "-c", `setsid sh -c 'sleep 20 & echo $! > "$1"; wait' sh "$1" > /dev/null 2>&1 &
				while [ ! -s "$1" ]; do sleep 0.01; done`, "sh", pidFile}}, nil,
				func(t *testing.T, _ worker.Result, _ int) {
					pid := readPid(t, pidFile)
					if !gone(pid) {
						t.Fatalf("the stray (pid %d) outside the job's group is still there after the result", pid)
					}
				}
		}},
		{"a missing dir", workerproto.OutcomeFailed, workerproto.KindSpawn, func(t *testing.T) (map[string]any, func(*testing.T, func()), check) {
			return map[string]any{"command": []string{"true"}, "dir": "/no/such/dir"}, nil, func(t *testing.T, res worker.Result, _ int) {
				if res.ExitCode != nil || !strings.Contains(res.Error.Message, "no such file or directory") {
					t.Fatalf("result %+v (%v), want a spawn failure: no such file or directory", res, res.Error)
				}
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := pooledHandler(t, 1, never)
			sup := waitIdle(t, h, 1)[0]
			spec, during, after := tc.job(t)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			done := make(chan worker.Result, 1)
			go func() { done <- h.Run(ctx, job(t, spec)) }()
			if during != nil {
				during(t, func() { cancel(worker.ErrCancelled) })
			}
			var res worker.Result
			select {
			case res = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("the handler did not return")
			}
			wantOutcome(t, res, tc.outcome, tc.kind)
			if pooled, onDemand := h.Served(); pooled != 1 || onDemand != 0 {
				t.Fatalf("served %d by an idle supervisor, %d by one started for the job: want 1, 0", pooled, onDemand)
			}
			after(t, res, sup)
			if !gone(sup) {
				t.Fatalf("the supervisor (pid %d) is still there after the job's result", sup)
			}
		})
	}
}

// The pool holds min(capacity, 4) supervisors, filled at start-up; none without a supervisor.
func TestPoolSize(t *testing.T) {
	cases := []struct {
		capacity, want int
		sup            []string
	}{{0, 0, supervisor}, {1, 1, supervisor}, {3, 3, supervisor}, {4, 4, supervisor}, {8, 4, supervisor}, {256, 4, supervisor}, {4, 0, nil}}
	for _, tc := range cases {
		t.Run("capacity "+strconv.Itoa(tc.capacity)+" supervised "+strconv.FormatBool(tc.sup != nil), func(t *testing.T) {
			h := process.NewHandlerQuiet(process.Options{Supervisor: tc.sup, Capacity: tc.capacity}, never)
			t.Cleanup(h.Close)
			if got := h.PoolSize(); got != tc.want {
				t.Fatalf("pool size %d, want %d", got, tc.want)
			}
			if tc.want > 0 {
				waitIdle(t, h, tc.want)
			}
		})
	}
}

// Jobs that start one after the other take the idle supervisors and then start theirs on demand:
// no refill competes with them. Once no job has started for the quiet period, the pool is full
// again, with new supervisors.
func TestPoolRefillsOnlyAfterAQuietPeriod(t *testing.T) {
	spec := map[string]any{"command": []string{"true"}}
	t.Run("no refill while jobs start", func(t *testing.T) {
		h := pooledHandler(t, 2, never)
		waitIdle(t, h, 2)
		for range 4 {
			wantOutcome(t, h.Run(context.Background(), job(t, spec)), workerproto.OutcomeSucceeded, "")
		}
		if pooled, onDemand := h.Served(); pooled != 2 || onDemand != 2 {
			t.Fatalf("served %d by idle supervisors, %d by ones started for the job: want 2, 2", pooled, onDemand)
		}
		if pids := h.IdlePids(); len(pids) != 0 {
			t.Fatalf("idle supervisors %v before any quiet period", pids)
		}
	})
	t.Run("refilled after the quiet period", func(t *testing.T) {
		h := pooledHandler(t, 2, 100*time.Millisecond)
		before := waitIdle(t, h, 2)
		for range 2 {
			wantOutcome(t, h.Run(context.Background(), job(t, spec)), workerproto.OutcomeSucceeded, "")
		}
		eventually.True(t, 20*time.Second, "the pool refilled with new supervisors", func() bool {
			pids := h.IdlePids()
			if len(pids) != 2 {
				return false
			}
			for _, pid := range pids {
				if slices.Contains(before, pid) || !alive(pid) {
					return false
				}
			}
			return true
		})
		if pooled, _ := h.Served(); pooled < 1 {
			t.Fatal("no job was served by an idle supervisor")
		}
	})
}

// An idle supervisor that died (killed from outside, or ended by a stop signal) is no problem:
// the next job starts its supervisor on demand and runs.
func TestDeadIdleSupervisorIsReplacedOnDemand(t *testing.T) {
	cases := []struct {
		name     string
		sig      syscall.Signal
		awaitEnd bool // wait until it is reaped before the job starts
	}{
		{"SIGKILL, the job at once", syscall.SIGKILL, false},
		{"SIGKILL, reaped before the job", syscall.SIGKILL, true},
		{"SIGTERM, ended before the job", syscall.SIGTERM, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := pooledHandler(t, 1, never)
			sup := waitIdle(t, h, 1)[0]
			if err := syscall.Kill(sup, tc.sig); err != nil {
				t.Fatal(err)
			}
			if tc.awaitEnd {
				eventually.True(t, 10*time.Second, "the idle supervisor reaped", func() bool { return gone(sup) })
			}
			res := h.Run(context.Background(), job(t, map[string]any{"command": []string{"sh", "-c", `echo "ok $PPID"`}}))
			wantOutcome(t, res, workerproto.OutcomeSucceeded, "")
			if !strings.HasPrefix(res.OutputTail, "ok ") || res.OutputTail == "ok "+strconv.Itoa(sup)+"\n" {
				t.Fatalf("output %q: want ok from another supervisor than the dead one (%d)", res.OutputTail, sup)
			}
			if pooled, onDemand := h.Served(); pooled != 0 || onDemand != 1 {
				t.Fatalf("served %d by an idle supervisor, %d by one started for the job: want 0, 1", pooled, onDemand)
			}
		})
	}
}

// Close kills and reaps every idle supervisor (no zombie either); a job after it still runs.
func TestCloseKillsAndReapsIdleSupervisors(t *testing.T) {
	h := pooledHandler(t, 4, 100*time.Millisecond)
	pids := waitIdle(t, h, 4)
	h.Close()
	for _, pid := range pids {
		if !gone(pid) {
			t.Fatalf("idle supervisor %d is still there (running or a zombie) after Close", pid)
		}
	}
	wantOutcome(t, h.Run(context.Background(), job(t, map[string]any{"command": []string{"true"}})), workerproto.OutcomeSucceeded, "")
	if pooled, onDemand := h.Served(); pooled != 0 || onDemand != 1 {
		t.Fatalf("served %d by an idle supervisor, %d on demand after Close: want 0, 1", pooled, onDemand)
	}
	if pids := h.IdlePids(); len(pids) != 0 {
		t.Fatalf("idle supervisors %v after Close", pids)
	}
}

// A supervisor whose spec pipe closes without a message exits 0 and writes nothing anywhere; a
// cut message is refused ("usage", 125) and starts nothing.
func TestSupervisorWithoutAJob(t *testing.T) {
	cases := []struct {
		name, msg, status string
		code              int
	}{
		{"EOF without a message", "", "", 0},
		{"a cut message", "/bin/true\x00\x001\x00true", "usage\n", 125},
		{"an argument count beyond the message", "/bin/true\x00\x005\x000\x00true\x00", "usage\n", 125},
		{"an env count beyond the message", "/bin/true\x00\x001\x002\x00true\x00A=1\x00", "usage\n", 125},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, status, out := superviseMessage(t, tc.msg)
			if code != tc.code {
				t.Fatalf("exit %d, want %d", code, tc.code)
			}
			if status != tc.status || out != "" {
				t.Fatalf("status %q, output %q: want status %q and no output", status, out, tc.status)
			}
		})
	}
}

// superviseMessage runs a supervisor, as the worker starts one, with msg on its spec pipe; it
// returns the supervisor's exit code, its status lines and its output.
func superviseMessage(t *testing.T, msg string) (int, string, string) {
	t.Helper()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer statusR.Close()
	specR, specW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(supervisor[0], supervisor[1], strconv.Itoa(os.Getpid()))
	cmd.ExtraFiles = []*os.File{statusW, specR}
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	statusW.Close()
	specR.Close()
	if _, err := specW.WriteString(msg); err != nil {
		t.Fatal(err)
	}
	specW.Close()
	_ = cmd.Wait()
	status, _ := readAll(statusR)
	return cmd.ProcessState.ExitCode(), status, out.String()
}

// A job's message cut short (the worker died, or gave up on a supervisor that read too slowly,
// in the middle of a message beyond the pipe's buffer) is refused wherever the cut falls, after a
// NUL too: the job never runs with part of its argv or env, nor at all.
func TestACutJobMessageStartsNothing(t *testing.T) {
	ran := filepath.Join(t.TempDir(), "ran")
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := process.EncodeJob(sh, "/", []string{"sh", "-c", `echo "ran $A $B" > "$1"`, "sh", ran}, []string{"A=1", "B=2"})
	if err != nil {
		t.Fatal(err)
	}
	for n := range len(msg) {
		if _, _, _, _, err := process.DecodeJob(msg[:n]); err == nil {
			t.Fatalf("the message cut to %d of its %d bytes (%q) decodes", n, len(msg), msg[:n])
		}
	}
	for n := range len(msg) {
		if msg[n] != 0 || n == len(msg)-1 {
			continue
		}
		code, status, out := superviseMessage(t, string(msg[:n+1]))
		if code != 125 || status != "usage\n" || out != "" {
			t.Fatalf("the message cut after its NUL at %d: exit %d, status %q, output %q: want 125, usage, none", n, code, status, out)
		}
		if _, err := os.Stat(ran); !errors.Is(err, os.ErrNotExist) {
			b, _ := os.ReadFile(ran)
			t.Fatalf("the message cut after its NUL at %d ran the job (%q, %v)", n, b, err)
		}
	}
	code, status, _ := superviseMessage(t, string(msg))
	if b, err := os.ReadFile(ran); code != 0 || !strings.HasSuffix(status, "exit 0\n") || string(b) != "ran 1 2\n" {
		t.Fatalf("the whole message: exit %d, status %q, the job wrote %q (%v): want it run with its env", code, status, b, err)
	}
}

func readAll(f *os.File) (string, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(f)
	return b.String(), err
}

// An idle supervisor that accepted its job may run it to the end before the handler looks at its
// acknowledgement: the acknowledgement and the end of its status pipe are then both there. It ran
// the job, which must not start a second time on a supervisor started for it. Each round has the
// same one-in-two chance to take the end first, so a handler that does runs the job twice in
// one of the rounds.
func TestAnIdleSupervisorThatRanItsJobBeforeTheAckRunsItOnce(t *testing.T) {
	for round := range 12 {
		h := pooledHandler(t, 1, never)
		h.EndBeforeTheAck()
		waitIdle(t, h, 1)
		ran := filepath.Join(t.TempDir(), "ran")
		res := h.Run(context.Background(), job(t, map[string]any{"command": []string{"sh", "-c", `echo ran >> "$1"`, "sh", ran}}))
		wantOutcome(t, res, workerproto.OutcomeSucceeded, "")
		if b, err := os.ReadFile(ran); err != nil || string(b) != "ran\n" {
			t.Fatalf("round %d: the job ran %d times (%q, %v), want once", round, strings.Count(string(b), "ran"), b, err)
		}
		if pooled, onDemand := h.Served(); pooled != 1 || onDemand != 0 {
			t.Fatalf("round %d: served %d by the idle supervisor, %d by one started for the job: want 1, 0", round, pooled, onDemand)
		}
		h.Close()
	}
}

// procState is the state letter of pid (R, S, T, Z…), "" once it is gone.
func procState(pid int) string {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// An idle supervisor that was stopped (SIGSTOP) does not hold its job, whose timeout has not
// started yet: once it has not acknowledged the message for the acknowledgement's wait, it is
// killed and reaped, and the job runs on a supervisor started for it; also with a message beyond
// the pipe's buffer, whose write waits no longer than that.
func TestAStoppedIdleSupervisorDoesNotHoldTheJob(t *testing.T) {
	for _, envKiB := range []int{0, 4 * 30} {
		t.Run("env of "+strconv.Itoa(envKiB)+" KiB", func(t *testing.T) {
			h := pooledHandler(t, 1, never)
			h.SetAckWait(time.Second)
			sup := waitIdle(t, h, 1)[0]
			t.Cleanup(func() { _ = syscall.Kill(sup, syscall.SIGKILL) }) // a failed test leaves nothing stopped
			if err := syscall.Kill(sup, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			eventually.True(t, 10*time.Second, "the idle supervisor stopped", func() bool { return procState(sup) == "T" })
			env := map[string]string{}
			for i := range envKiB / 30 {
				env["BIG"+strconv.Itoa(i)] = strings.Repeat("x", 30<<10)
			}
			spec := map[string]any{"command": []string{"sh", "-c", `echo "ok $PPID ${#BIG0}"`}, "env": env, "timeout": "5s"}
			done := make(chan worker.Result, 1)
			go func() { done <- h.Run(context.Background(), job(t, spec)) }()
			var res worker.Result
			select {
			case res = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("the job still waits on its stopped idle supervisor")
			}
			wantOutcome(t, res, workerproto.OutcomeSucceeded, "")
			want := 0
			if envKiB > 0 {
				want = 30 << 10
			}
			if !strings.HasPrefix(res.OutputTail, "ok ") || strings.HasPrefix(res.OutputTail, "ok "+strconv.Itoa(sup)+" ") ||
				!strings.HasSuffix(res.OutputTail, " "+strconv.Itoa(want)+"\n") {
				t.Fatalf("output %q: want ok from another supervisor than the stopped one (%d), with the env", res.OutputTail, sup)
			}
			if pooled, onDemand := h.Served(); pooled != 0 || onDemand != 1 {
				t.Fatalf("served %d by an idle supervisor, %d by one started for the job: want 0, 1", pooled, onDemand)
			}
			if !gone(sup) {
				t.Fatalf("the stopped idle supervisor (pid %d) is still there (%s)", sup, procState(sup))
			}
		})
	}
}
