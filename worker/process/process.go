// Package process is the reference worker.Handler: it runs the command of an execution spec
//
//	{"command": ["prog", "arg", …], "env": {"K": "V"}, "dir": "/work", "timeout": "30s"}
//
// as an argv (never through a shell: a ";" in an argument is an argument), in a process group of
// its own, and stops the whole group (SIGTERM, then SIGKILL after the kill grace) when the spec's
// timeout passes or the job's context ends (cancel, lease loss, drain). It keeps the last 8 KiB of
// the combined stdout and stderr and reports the exit code or the signal.
//
// With Options.Supervisor, each job runs under a small supervisor process (Supervise) that dies
// with the worker (Pdeathsig) and then kills the job's group and every descendant (it is their
// child subreaper): a worker killed by SIGKILL leaves nothing running. Linux only.
//
// Unknown spec fields are refused (bad_spec), as the protocol refuses unknown keys: a misspelt
// "timeout" must not run a job without one. The spec may hold secrets: no message quotes it.
package process

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/qlcontrol/controlcore/worker"
	"github.com/qlcontrol/controlcore/workerproto"
)

// Spec is the execution spec this handler runs.
type Spec struct {
	Command []string          `json:"command"`
	Env     map[string]string `json:"env,omitempty"`
	Dir     string            `json:"dir,omitempty"`
	Timeout string            `json:"timeout,omitempty"` // a Go duration ("30s", "5m"); none: only the lease bounds it
}

// Options configure the handler.
type Options struct {
	// KillGrace is the time between SIGTERM and SIGKILL to the process group (default 2 s; it
	// must not exceed the Runner's KillGrace, which the lease deadline leaves for it).
	KillGrace time.Duration
	// BaseEnv is the environment the spec's env is added to; nil is the worker's own.
	BaseEnv []string
	// Supervisor is the argv that starts the per-job supervisor: a binary that runs
	// Supervise(os.Args[2:]) when its first argument is SupervisorCommand, e.g. qlworker's
	// {"/proc/self/exe", SupervisorCommand} (the running binary, even if replaced on disk).
	// With it, a job and all its descendants die when the worker dies by any means (the lease
	// they run under would expire and the Run be retried elsewhere). Nil runs the job as a
	// direct child: that child dies with the worker, its children do not.
	Supervisor []string
}

// TailBytes is how much of the output is kept: the protocol's output tail.
const TailBytes = workerproto.OutputTailMaxBytes

// New returns the handler.
func New(opts Options) worker.Handler {
	if opts.KillGrace <= 0 {
		opts.KillGrace = 2 * time.Second
	}
	return func(ctx context.Context, job worker.Job) worker.Result { return run(ctx, opts, job) }
}

// ParseSpec decodes and checks a spec; its error is the bad_spec message (it names the field,
// never a value, nor a key of "env", nor an unknown field's name).
func ParseSpec(raw []byte) (Spec, time.Duration, error) {
	var s Spec
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, 0, fmt.Errorf("spec: %s", describeJSONError(err))
	}
	if dec.More() {
		return s, 0, errors.New("spec: more than one JSON value")
	}
	if len(s.Command) == 0 || s.Command[0] == "" {
		return s, 0, errors.New(`spec: "command" must name a program: ["prog", "arg", …]`)
	}
	for i, a := range s.Command {
		if strings.IndexByte(a, 0) >= 0 {
			return s, 0, fmt.Errorf("spec: command[%d] holds a NUL byte", i)
		}
	}
	for k, v := range s.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(v, 0) >= 0 {
			return s, 0, errors.New(`spec: an "env" key is not a valid variable name (empty, or holds "=" or a NUL byte), or its value holds a NUL byte`)
		}
	}
	if strings.IndexByte(s.Dir, 0) >= 0 {
		return s, 0, errors.New(`spec: "dir" holds a NUL byte`)
	}
	var timeout time.Duration
	if s.Timeout != "" {
		d, err := time.ParseDuration(s.Timeout)
		if err != nil || d <= 0 {
			return s, 0, errors.New(`spec: "timeout" is not a positive duration such as "30s" or "5m"`)
		}
		timeout = d
	}
	return s, timeout, nil
}

// describeJSONError keeps the shape of a decode error (the field, the expected type) and drops
// any quoted value.
func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		// Field is a path; past its first element it may hold an "env" key.
		field, _, _ := strings.Cut(te.Field, ".")
		if !knownField[field] {
			return "not a JSON object of the spec's shape"
		}
		return fmt.Sprintf("field %q must be %s, not a JSON %s", field, te.Type, te.Value)
	case errors.As(err, &se):
		return fmt.Sprintf("not valid JSON (at byte %d)", se.Offset)
	case errors.Is(err, io.EOF):
		return "empty"
	}
	if strings.HasPrefix(err.Error(), "json: unknown field ") {
		return `an unknown field (known: "command", "env", "dir", "timeout"; field names are not shown)`
	}
	return "not a JSON object of the spec's shape"
}

var knownField = map[string]bool{"command": true, "env": true, "dir": true, "timeout": true}

func failed(kind, format string, args ...any) worker.Result {
	return worker.Result{Outcome: workerproto.OutcomeFailed, Error: &workerproto.AttemptError{
		Kind: kind, Message: workerproto.TruncateUTF8(fmt.Sprintf(format, args...), workerproto.MaxMessageBytes)}}
}

func run(ctx context.Context, opts Options, job worker.Job) worker.Result {
	spec, timeout, err := ParseSpec(job.Spec)
	if err != nil {
		return failed(workerproto.KindBadSpec, "%s", err)
	}
	env := opts.BaseEnv
	if env == nil {
		env = os.Environ()
	}
	env = append(append([]string(nil), env...),
		"QL_RUN_ID="+job.RunID, "QL_ATTEMPT_ID="+job.AttemptID, "QL_ATTEMPT_NO="+strconv.Itoa(job.AttemptNo),
		"QL_PROJECT="+job.Project, "QL_TASK="+job.Task)
	for k, v := range spec.Env {
		env = append(env, k+"="+v) // later entries win (os/exec keeps the last of a key)
	}

	// exec.Command, not a shell: the argv reaches the program as it is. It resolves the program
	// in the worker's $PATH, as a direct start would.
	cmd := exec.Command(spec.Command[0], spec.Command[1:]...)
	if cmd.Err != nil {
		return failed(workerproto.KindSpawn, "cannot start the program: %s", spawnReason(spawnClass(cmd.Err)))
	}
	supervised := len(opts.Supervisor) > 0
	var statusR, statusW *os.File
	if supervised {
		// The supervisor gets the job's env and dir: it passes them on to the job.
		args := append(append([]string(nil), opts.Supervisor...), strconv.Itoa(os.Getpid()), cmd.Path, "--")
		cmd = &exec.Cmd{Path: opts.Supervisor[0], Args: append(args, spec.Command...)}
		if statusR, statusW, err = os.Pipe(); err != nil {
			return failed(workerproto.KindSpawn, "create the status pipe: %s", pathError(err))
		}
		cmd.ExtraFiles = []*os.File{statusW}
		defer statusR.Close()
	}
	cmd.Env, cmd.Dir = env, spec.Dir
	// A group of its own, so a stop reaches the job's children; the kernel signals the child when
	// the worker dies: the supervisor then kills the job's tree; an unsupervised job dies alone.
	deathSig := syscall.SIGKILL
	if supervised {
		deathSig = sigParentDied
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: deathSig}
	pr, pw, err := os.Pipe()
	if err != nil {
		if statusW != nil {
			statusW.Close()
		}
		return failed(workerproto.KindSpawn, "create the output pipe: %s", pathError(err))
	}
	cmd.Stdout, cmd.Stderr = pw, pw // an *os.File: handed to the child, no copying goroutine in Wait
	err = start(cmd)
	pw.Close()
	if statusW != nil {
		statusW.Close()
	}
	if err != nil {
		pr.Close()
		what := "the program"
		if supervised {
			what = "the job's supervisor (or its dir)"
		}
		return failed(workerproto.KindSpawn, "cannot start %s: %s", what, spawnReason(spawnClass(err)))
	}
	started := time.Now()
	ring := newRing(TailBytes)
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(ring, pr); close(copied) }()

	// The job's group: the direct child's, or the one the supervisor reports.
	var jobPgid atomic.Int64
	statusDone := make(chan supStatus, 1)
	if supervised {
		go func() {
			statusDone <- readStatus(bufio.NewScanner(statusR), func(pid int) { jobPgid.Store(int64(pid)) })
		}()
	} else {
		jobPgid.Store(int64(cmd.Process.Pid))
	}
	// killGroup SIGKILLs the job's whole tree: the supervisor kills the group and the descendants
	// that left it; the worker also kills the group itself, in case the supervisor is stuck.
	killGroup := func() {
		if supervised {
			_ = cmd.Process.Signal(sigKill)
		}
		if g := jobPgid.Load(); g > 0 {
			_ = syscall.Kill(-int(g), syscall.SIGKILL)
		}
	}
	exited := make(chan struct{})
	var stopMu sync.Mutex
	var stopWhy error // set before the group is signalled
	go func() {
		var timer <-chan time.Time
		if timeout > 0 {
			t := time.NewTimer(timeout)
			defer t.Stop()
			timer = t.C
		}
		var why error
		select {
		case <-exited:
			return
		case <-timer:
			why = errTimeout
		case <-ctx.Done():
			why = context.Cause(ctx)
		}
		stopMu.Lock()
		stopWhy = why
		stopMu.Unlock()
		if supervised {
			_ = cmd.Process.Signal(sigStop) // it forwards SIGTERM to the job's group
		} else {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		}
		kill := time.NewTimer(opts.KillGrace)
		defer kill.Stop()
		select {
		case <-exited:
			return
		case <-kill.C:
			killGroup() // the kill grace is over
		}
		if supervised { // a supervisor that does not end after its kill is wedged: end it
			kill.Reset(supervisorWedged)
			select {
			case <-exited:
			case <-kill.C:
				_ = cmd.Process.Kill()
			}
		}
	}()

	waitErr := cmd.Wait()
	close(exited)
	// The leader is gone; what it left in its group must not outlive the attempt (it would run
	// without a lease). The supervisor has done this already, and more. Then the pipe closes
	// once the last writer is dead.
	if !supervised {
		killGroup()
	}
	select {
	case <-copied:
	case <-time.After(opts.KillGrace):
		pr.Close() // a process that left the group still holds the pipe: stop reading
		<-copied
	}
	pr.Close()

	res := worker.Result{}
	res.OutputTail, res.OutputTruncated = ring.tail()
	state := cmd.ProcessState
	if state == nil {
		r := failed(workerproto.KindHandler, "wait for the process: %s", waitReason(waitErr))
		r.OutputTail, r.OutputTruncated = res.OutputTail, res.OutputTruncated
		return r
	}
	ws, _ := state.Sys().(syscall.WaitStatus)
	stopMu.Lock()
	why := stopWhy
	stopMu.Unlock()
	if supervised {
		st := <-statusDone
		switch {
		case st.spawn != "":
			r := failed(workerproto.KindSpawn, "cannot start the program: %s", spawnReason(st.spawn))
			r.OutputTail, r.OutputTruncated = res.OutputTail, res.OutputTruncated
			return r
		case !st.exit:
			if g := jobPgid.Load(); g > 0 {
				_ = syscall.Kill(-int(g), syscall.SIGKILL)
			}
			if why == nil { // a stop may end a supervisor still starting: that is the stop's result
				r := failed(workerproto.KindHandler, "the job's supervisor ended without a report (%s); the job's group was killed", describeWait(ws))
				r.OutputTail, r.OutputTruncated = res.OutputTail, res.OutputTruncated
				return r
			}
		default:
			ws = st.waitStat
		}
	}
	switch {
	case ws.Signaled():
		res.Signal = signalName(ws.Signal())
	default:
		code := ws.ExitStatus()
		res.ExitCode = &code
	}
	elapsed := time.Since(started).Round(time.Millisecond)
	switch {
	case why == errTimeout:
		res.Outcome = workerproto.OutcomeFailed
		res.Error = &workerproto.AttemptError{Kind: workerproto.KindTimeout,
			Message: fmt.Sprintf("timed out after %s (the spec's timeout); the process group was stopped", elapsed)}
	case why != nil:
		kind := workerproto.KindCancelled
		if errors.Is(why, worker.ErrLeaseExpired) || errors.Is(why, worker.ErrLeaseLost) {
			kind = workerproto.KindLeaseLost
		}
		res.Outcome = workerproto.OutcomeFailed
		res.Error = &workerproto.AttemptError{Kind: kind, Message: fmt.Sprintf("stopped after %s: %v", elapsed, why)}
	case res.ExitCode != nil && *res.ExitCode == 0:
		res.Outcome = workerproto.OutcomeSucceeded
	case res.ExitCode != nil:
		res.Outcome = workerproto.OutcomeFailed
		res.Error = &workerproto.AttemptError{Kind: workerproto.KindExitStatus, Message: fmt.Sprintf("exit status %d", *res.ExitCode)}
	default:
		res.Outcome = workerproto.OutcomeFailed
		res.Error = &workerproto.AttemptError{Kind: workerproto.KindExitStatus, Message: "killed by " + res.Signal}
	}
	return res
}

var errTimeout = errors.New("timeout")

// supervisorWedged is how long a supervisor may take to end after its kill signal before the
// worker SIGKILLs it (its report is then lost; the job's group was killed directly already).
// Generous: a loaded machine must not lose reports to it.
const supervisorWedged = 10 * time.Second

func describeWait(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "killed by " + signalName(ws.Signal())
	}
	return fmt.Sprintf("exit status %d", ws.ExitStatus())
}

// pathError is an *os.PathError without its path.
func pathError(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return "the system refused"
}

// waitReason is a failed wait without the path os/exec may quote.
func waitReason(err error) string { return pathError(err) }

// The forking thread: the kernel sends a child its Pdeathsig when the *thread* that forked it
// exits, and the Go runtime ends a thread when a goroutine locked to it returns. Every job is
// started from one goroutine locked to its thread that never returns, so that thread lives as
// long as the worker, whatever other code does with LockOSThread.
var (
	forkOnce sync.Once
	forkReq  chan forkCall
)

type forkCall struct {
	cmd  *exec.Cmd
	done chan error
}

func start(cmd *exec.Cmd) error {
	forkOnce.Do(func() {
		forkReq = make(chan forkCall)
		go func() {
			runtime.LockOSThread() // never unlocked: this thread is the parent of every job
			for c := range forkReq {
				c.done <- c.cmd.Start() // *os.File stdio: Start spawns no goroutine that needs this thread
			}
		}()
	})
	c := forkCall{cmd: cmd, done: make(chan error, 1)}
	forkReq <- c
	return <-c.done
}

var signalNames = map[syscall.Signal]string{
	syscall.SIGHUP: "SIGHUP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT", syscall.SIGILL: "SIGILL",
	syscall.SIGTRAP: "SIGTRAP", syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE",
	syscall.SIGKILL: "SIGKILL", syscall.SIGUSR1: "SIGUSR1", syscall.SIGSEGV: "SIGSEGV", syscall.SIGUSR2: "SIGUSR2",
	syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGTERM: "SIGTERM", syscall.SIGXCPU: "SIGXCPU",
	syscall.SIGXFSZ: "SIGXFSZ", syscall.SIGSYS: "SIGSYS",
}

func signalName(s syscall.Signal) string {
	if n, ok := signalNames[s]; ok {
		return n
	}
	return "SIG" + strconv.Itoa(int(s))
}

// ring keeps the last size bytes written to it.
type ring struct {
	mu    sync.Mutex
	buf   []byte
	start int // index of the oldest byte once full
	full  bool
	total int64
}

func newRing(size int) *ring { return &ring{buf: make([]byte, 0, size)} }

func (r *ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(p)
	r.total += int64(n)
	size := cap(r.buf)
	if len(p) >= size { // only the end of p survives
		r.buf = append(r.buf[:0], p[len(p)-size:]...)
		r.start, r.full = 0, true
		return n, nil
	}
	if !r.full {
		room := size - len(r.buf)
		if len(p) <= room {
			r.buf = append(r.buf, p...)
			return n, nil
		}
		r.buf = append(r.buf, p[:room]...)
		p = p[room:]
		r.full = true
	}
	for len(p) > 0 { // overwrite the oldest bytes
		c := copy(r.buf[r.start:], p)
		p = p[c:]
		r.start = (r.start + c) % size
	}
	return n, nil
}

// tail is the kept bytes in order, from a rune start when the head was cut, as valid UTF-8.
func (r *ring) tail() (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]byte, 0, len(r.buf))
	out = append(out, r.buf[r.start:]...)
	out = append(out, r.buf[:r.start]...)
	cut := r.total > int64(len(out))
	if cut {
		for i := 0; i < utf8.UTFMax-1 && len(out) > 0 && !utf8.RuneStart(out[0]); i++ {
			out = out[1:]
		}
	}
	s, trimmed := worker.TailUTF8(string(out), TailBytes)
	return s, cut || trimmed
}
