// Package process is the reference worker.Handler: it runs the command of an execution spec
//
//	{"command": ["prog", "arg", …], "env": {"K": "V"}, "dir": "/work", "timeout": "30s"}
//
// as an argv (never through a shell: a ";" in an argument is an argument), in a process group of
// its own, and stops the whole group (SIGTERM, then SIGKILL after the kill grace) when the spec's
// timeout passes or the job's context ends (cancel, lease loss, drain). It keeps the last 8 KiB of
// the combined stdout and stderr and reports the exit code or the signal.
//
// Unknown spec fields are refused (bad_spec), as the protocol refuses unknown keys: a misspelt
// "timeout" must not run a job without one. The spec may hold secrets: no message quotes it.
package process

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
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
// never a value).
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
			return s, 0, fmt.Errorf("spec: env key %s is not a valid variable (or its value holds a NUL byte)", word(k))
		}
	}
	if strings.IndexByte(s.Dir, 0) >= 0 {
		return s, 0, errors.New(`spec: "dir" holds a NUL byte`)
	}
	var timeout time.Duration
	if s.Timeout != "" {
		d, err := time.ParseDuration(s.Timeout)
		if err != nil || d <= 0 {
			return s, 0, fmt.Errorf(`spec: "timeout" is %s, want a positive duration such as "30s" or "5m"`, word(s.Timeout))
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
		return fmt.Sprintf("field %q must be %s, not a JSON %s", te.Field, te.Type, te.Value)
	case errors.As(err, &se):
		return fmt.Sprintf("not valid JSON (at byte %d)", se.Offset)
	case errors.Is(err, io.EOF):
		return "empty"
	}
	msg := err.Error()
	if quoted, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		name, err := strconv.Unquote(quoted)
		if err != nil {
			name = quoted
		}
		return "unknown field " + word(name) + ` (known: "command", "env", "dir", "timeout")`
	}
	return "not a JSON object of the spec's shape"
}

// safeWord is what a message may quote of a spec (a program name, a duration); anything else is
// described by its length only, as the command-line tools do.
var safeWord = regexp.MustCompile(`^[A-Za-z0-9_./+-]{1,64}$`)

func word(s string) string {
	if safeWord.MatchString(s) {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("(%d bytes, not shown)", len(s))
}

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

	// exec.Command, not a shell: the argv reaches the program as it is.
	cmd := exec.Command(spec.Command[0], spec.Command[1:]...)
	cmd.Env, cmd.Dir = env, spec.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a group of its own: a stop reaches its children
	pr, pw, err := os.Pipe()
	if err != nil {
		return failed(workerproto.KindSpawn, "create the output pipe: %v", err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw // an *os.File: handed to the child, no copying goroutine in Wait
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return failed(workerproto.KindSpawn, "cannot start program %s: %s", word(spec.Command[0]), spawnReason(err))
	}
	pw.Close()
	started := time.Now()
	ring := newRing(TailBytes)
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(ring, pr); close(copied) }()

	pgid := cmd.Process.Pid
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
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		kill := time.NewTimer(opts.KillGrace)
		defer kill.Stop()
		select {
		case <-exited:
		case <-kill.C:
			_ = syscall.Kill(-pgid, syscall.SIGKILL) // the kill grace is over
		}
	}()

	waitErr := cmd.Wait()
	close(exited)
	// The leader is gone; what it left in its group must not outlive the attempt (it would run
	// without a lease). Then the pipe closes once the last writer is dead.
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // strays of a leader that exited
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
		r := failed(workerproto.KindHandler, "wait for the process: %v", waitErr)
		r.OutputTail, r.OutputTruncated = res.OutputTail, res.OutputTruncated
		return r
	}
	ws, _ := state.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled():
		res.Signal = signalName(ws.Signal())
	default:
		code := state.ExitCode()
		res.ExitCode = &code
	}
	stopMu.Lock()
	why := stopWhy
	stopMu.Unlock()
	elapsed := time.Since(started).Round(time.Millisecond)
	switch {
	case why == errTimeout:
		res.Outcome = workerproto.OutcomeFailed
		res.Error = &workerproto.AttemptError{Kind: workerproto.KindTimeout,
			Message: fmt.Sprintf("timed out after %s (spec timeout %s); the process group was stopped", elapsed, timeout)}
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

// spawnReason is the cause of a failed start without the path exec quotes (the spec's).
func spawnReason(err error) string {
	switch {
	case errors.Is(err, exec.ErrNotFound):
		return "not found in $PATH"
	case errors.Is(err, os.ErrNotExist):
		return "no such file or directory (the program or the dir)"
	case errors.Is(err, os.ErrPermission):
		return "permission denied"
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	return "the system refused to start it"
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
