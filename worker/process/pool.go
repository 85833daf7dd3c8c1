package process

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Pre-started supervisors. Starting a supervisor costs a Go binary's exec and start-up (a few ms
// of CPU); on a Run's path it competes for the cores with the placement and the ACKs of the other
// Runs of the same burst. So a handler keeps up to min(Options.Capacity, maxIdle) supervisors
// started and idle (each blocked reading its spec pipe), and hands one its job when the job
// starts. An idle supervisor is started exactly as an on-demand one (the same Pdeathsig, the same
// WORKER_PID check), dies with the worker, and serves one job. Refills wait for a quiet period
// with no job start, so they never compete with the burst that emptied the pool.

// maxIdle bounds the pool of a handler, whatever its capacity.
const maxIdle = 4

// refillQuiet is how long a handler must start no job before it refills its pool.
const refillQuiet = 100 * time.Millisecond

// supProc is a started process of a job: a supervisor (idle until it gets its spec) or, without
// Options.Supervisor, the job's program itself.
type supProc struct {
	cmd    *exec.Cmd
	out    *os.File      // the read end of its output pipe (stdout and stderr)
	status *os.File      // supervisor: the read end of its status pipe (its fd 3)
	spec   *os.File      // supervisor: the write end of its spec pipe (its fd 4), nil once sent
	exited chan struct{} // closed once it is reaped (cmd.ProcessState is then set)
	err    error         // the wait's error, once exited is closed
}

// reap waits for the process in the background: an idle supervisor killed from outside leaves no
// zombie, and a job's wait is a channel.
func (p *supProc) reap() {
	p.exited = make(chan struct{})
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
}

func (p *supProc) dead() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// discard kills a supervisor that serves no job, reaps it and closes its pipes.
func (p *supProc) discard() {
	_ = p.cmd.Process.Kill()
	<-p.exited
	p.closeFiles()
}

func (p *supProc) closeFiles() {
	for _, f := range []*os.File{p.out, p.status, p.spec} {
		if f != nil {
			_ = f.Close()
		}
	}
}

// startSupervisor starts an idle supervisor: `SUPERVISOR… WORKER_PID`, its status pipe on fd 3,
// its spec pipe on fd 4, its stdout and stderr the output pipe. Its env is the base env: the
// job's own env reaches it through the spec pipe only (never argv, which every user can read).
func startSupervisor(opts Options) (*supProc, error) {
	args := append(append([]string(nil), opts.Supervisor...), strconv.Itoa(os.Getpid()))
	cmd := &exec.Cmd{Path: opts.Supervisor[0], Args: args, Env: baseEnv(opts)}
	// A group of its own, so a stop reaches the job's children; the kernel signals the supervisor
	// when the worker dies, and it then kills the job's tree (or, idle, exits).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: sigParentDied}
	var files []*os.File // the child's ends, closed here once it started
	defer func() {
		for _, f := range files {
			_ = f.Close()
		}
	}()
	p := &supProc{cmd: cmd}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, pipeError{"status", err}
	}
	p.status, files = statusR, append(files, statusW)
	specR, specW, err := os.Pipe()
	if err != nil {
		p.closeFiles()
		return nil, pipeError{"spec", err}
	}
	p.spec, files = specW, append(files, specR)
	outR, outW, err := os.Pipe()
	if err != nil {
		p.closeFiles()
		return nil, pipeError{"output", err}
	}
	p.out, files = outR, append(files, outW)
	cmd.ExtraFiles = []*os.File{statusW, specR}
	cmd.Stdout, cmd.Stderr = outW, outW // *os.File: handed to the child, no copying goroutine in Wait
	if err := start(cmd); err != nil {
		p.closeFiles()
		return nil, err
	}
	p.reap()
	return p, nil
}

// pipeError is a failed os.Pipe for the named pipe.
type pipeError struct {
	which string
	err   error
}

func (e pipeError) Error() string { return "create the " + e.which + " pipe: " + pathError(e.err) }

func baseEnv(opts Options) []string {
	if opts.BaseEnv != nil {
		return opts.BaseEnv
	}
	return os.Environ()
}

// errRefused is an idle supervisor that could not take a spec (it had exited, or its spec pipe
// was closed: EPIPE).
var errRefused = errors.New("the supervisor is gone")

// send writes the job's message and closes the spec pipe: the supervisor reads it to EOF. A
// message beyond the pipe's buffer waits for the supervisor to read it, at most for wait.
func (p *supProc) send(msg []byte, wait time.Duration) error {
	if p.dead() {
		return errRefused
	}
	spec := p.spec
	p.spec = nil
	// A stuck supervisor must not hold the job forever.
	_ = spec.SetWriteDeadline(time.Now().Add(wait))
	_, err := spec.Write(msg)
	// Once written, the message is in the pipe, whatever its close says: a send reports a failure
	// only for a message the supervisor cannot have whole (it refuses a cut one), so a job whose
	// send failed can start on another supervisor without running twice.
	_ = spec.Close()
	return err
}

// pool is a handler's idle supervisors.
type pool struct {
	opts  Options
	size  int
	quiet time.Duration

	mu     sync.Mutex
	idle   []*supProc
	closed bool

	starts   atomic.Int64  // job starts: a refill in progress stops at the next one
	kick     chan struct{} // a job started: the quiet period starts again
	quit     chan struct{}
	loopDone chan struct{}

	pooled, onDemand atomic.Int64 // jobs served by an idle supervisor, by one started for them
}

func newPool(opts Options, size int, quiet time.Duration) *pool {
	p := &pool{opts: opts, size: size, quiet: quiet, kick: make(chan struct{}, 1),
		quit: make(chan struct{}), loopDone: make(chan struct{})}
	go p.loop()
	return p
}

// loop is the pool's one background goroutine: it fills the pool at start-up, then again each
// time no job has started for the quiet period.
func (p *pool) loop() {
	defer close(p.loopDone)
	timer := time.NewTimer(0) // the first fill at start-up
	defer timer.Stop()
	for {
		select {
		case <-p.quit:
			return
		case <-p.kick:
			timer.Reset(p.quiet)
		case <-timer.C:
			p.fill()
		}
	}
}

// jobStarted restarts the quiet period and stops a refill in progress.
func (p *pool) jobStarted() {
	p.starts.Add(1)
	select {
	case p.kick <- struct{}{}:
	default: // a kick is pending already
	}
}

// fill starts supervisors until the pool is full, the handler closes or a job starts.
func (p *pool) fill() {
	starts := p.starts.Load()
	for {
		p.mu.Lock()
		live := p.idle[:0]
		for _, s := range p.idle { // one killed from outside was reaped already: drop it
			if s.dead() {
				s.closeFiles()
			} else {
				live = append(live, s)
			}
		}
		p.idle = live
		full := p.closed || len(p.idle) >= p.size
		p.mu.Unlock()
		if full || p.starts.Load() != starts {
			return
		}
		select {
		case <-p.quit:
			return
		default:
		}
		s, err := startSupervisor(p.opts)
		if err != nil {
			return // the next quiet period tries again; jobs start theirs on demand meanwhile
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			s.discard()
			return
		}
		p.idle = append(p.idle, s)
		p.mu.Unlock()
	}
}

// take is the oldest idle supervisor, or nil when there is none. One killed from outside while
// idle is taken too: the job's send finds it gone and starts one on demand (one path for a
// supervisor gone before or while the job is handed to it).
func (p *pool) take() *supProc {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle) == 0 {
		return nil
	}
	s := p.idle[0]
	p.idle = p.idle[1:]
	return s
}

// close stops the refills, then kills and reaps every idle supervisor.
func (p *pool) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	close(p.quit)
	<-p.loopDone
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, s := range idle {
		s.discard()
	}
}
