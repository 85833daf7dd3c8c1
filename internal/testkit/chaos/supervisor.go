package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Process says how to run one process of the system under test.
type Process struct {
	// Command builds the process for owner (its name and, for both systems here, its client or
	// replica ID). The supervisor sets Stderr, Stdout and Pdeathsig.
	Command func(owner string) *exec.Cmd
	// Ready reports whether a line the process wrote to stderr says it is running.
	Ready func(line []byte) bool
	// Observe, if set, sees every line each process writes to stderr (to count what its log
	// says). It runs on the process's log reader, not under the supervisor's lock.
	Observe func(owner string, line []byte)
	// Holding, if set, names the keys owner holds work for now (qlsched: the triggers whose claim
	// it holds). The supervisor asks right after each fault and records the answer with the
	// fault and again 300 ms later (a claim statement sent just before a SIGSTOP still commits on
	// the server), and records the union with the fault (Applied), so that each miss can be tied
	// to the fault that stranded it.
	Holding func(owner string) []string
}

// Event is a change of a process, at wall-clock milliseconds (the local server's clock).
type Event struct {
	AtMs  int64
	Owner string
	What  string // start, ready, kill, stop, cont, term, exit
}

type phase int

const (
	starting phase = iota
	live
	stopped
	exiting
	dead
)

type proc struct {
	slot, inc int
	owner     string
	cmd       *exec.Cmd
	phase     phase
	exited    chan struct{}
}

// Supervisor runs Slots processes and applies a plan to them. At most MaxFaulted processes are
// faulted at a time (killed, stopped or restarting), besides StopAll, which needs all live: a
// plan's fault that would exceed that is skipped and counted, so the soak tests takeover under
// faults, not how few processes carry the load.
type Supervisor struct {
	Process    Process
	Slots      int
	MaxFaulted int    // 0 means 1
	Prefix     string // owner names: <Prefix><slot>-i<incarnation>
	LogDir     string

	mu       sync.Mutex
	procs    []*proc
	current  map[int]*proc
	events   []Event
	errs     []error
	wg       sync.WaitGroup
	Injected map[Kind]int // faults applied, by kind
	Aimed    int          // faults that hit the leader
	Skipped  int          // planned faults not applied (another process was faulted)
	// StopAllStops are the processes stopped by StopAll faults (Injected[StopAll] counts the faults).
	StopAllStops int
	applied      []Applied
}

func (s *Supervisor) record(owner, what string) {
	s.events = append(s.events, Event{AtMs: time.Now().UnixMilli(), Owner: owner, What: what})
}

// StartAll starts every slot.
func (s *Supervisor) StartAll() {
	for slot := range s.Slots {
		s.start(slot)
	}
}

func (s *Supervisor) start(slot int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current == nil {
		s.current, s.Injected = map[int]*proc{}, map[Kind]int{}
	}
	inc := 1
	if prev := s.current[slot]; prev != nil {
		inc = prev.inc + 1
	}
	p := &proc{slot: slot, inc: inc, owner: fmt.Sprintf("%s%d-i%d", s.Prefix, slot+1, inc), exited: make(chan struct{})}
	p.cmd = s.Process.Command(p.owner)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // the driver dies, its processes too
	logFile, err := os.Create(filepath.Join(s.LogDir, p.owner+".log"))
	if err != nil {
		s.errs = append(s.errs, err)
		return
	}
	p.cmd.Stdout = logFile
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		logFile.Close()
		s.errs = append(s.errs, err)
		return
	}
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		s.errs = append(s.errs, fmt.Errorf("start %s: %w", p.owner, err))
		return
	}
	s.current[slot] = p
	s.procs = append(s.procs, p)
	s.record(p.owner, "start")
	s.wg.Add(1)
	go s.watch(p, stderr, logFile)
}

// watch copies a process's stderr to its log, marks it live at its ready line, then reaps it.
func (s *Supervisor) watch(p *proc, stderr io.Reader, logFile *os.File) {
	defer s.wg.Done()
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		_, _ = logFile.Write(append(line, '\n'))
		if s.Process.Observe != nil {
			s.Process.Observe(p.owner, line)
		}
		if s.Process.Ready(line) {
			s.mu.Lock()
			if p.phase == starting {
				p.phase = live
				s.record(p.owner, "ready")
			}
			s.mu.Unlock()
		}
	}
	_ = p.cmd.Wait()
	logFile.Close()
	s.mu.Lock()
	p.phase = dead
	s.record(p.owner, "exit")
	s.mu.Unlock()
	close(p.exited)
}

// LiveCount is the number of slots whose process is running and past its ready line.
func (s *Supervisor) LiveCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, p := range s.current {
		if p.phase == live {
			n++
		}
	}
	return n
}

// IsLive reports whether owner's process is running and past its ready line.
func (s *Supervisor) IsLive(owner string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.current {
		if p.owner == owner {
			return p.phase == live
		}
	}
	return false
}

// WaitLive polls until every slot is live, or fails after timeout.
func (s *Supervisor) WaitLive(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for s.LiveCount() < s.Slots {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d processes live after %s (logs in %s)", s.LiveCount(), s.Slots, timeout, s.LogDir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

func (s *Supervisor) signal(p *proc, sig syscall.Signal, what string, next phase) {
	if err := p.cmd.Process.Signal(sig); err != nil {
		s.errs = append(s.errs, fmt.Errorf("%s %s: %w", what, p.owner, err))
		return
	}
	p.phase = next
	s.record(p.owner, what)
}

type owed struct {
	at time.Time
	do func()
}

// Run applies plan from start on (a whole second: the plan's faults land just after whole
// seconds of it), then returns once every follow-up (SIGCONT, restart) is done. leader names the
// owner the system calls its leader now ("" if none); a fault that aims at the leader hits it
// when it is live.
func (s *Supervisor) Run(ctx context.Context, start time.Time, plan []Fault, leader func() string) {
	var pending []owed
	next := 0
	// A planned fault is skipped while another process is down; if it was the plan's only fault
	// of its kind so far (NewPlan makes a short plan have every kind), the next planned fault takes
	// its kind, so that a run applies every kind its plan has (a soak with no restart proves less).
	var carried *Fault
	for next < len(plan) || len(pending) > 0 {
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond): // the driver's tick
		}
		now := time.Now()
		keep := pending[:0]
		var due []owed
		for _, o := range pending {
			if now.After(o.at) {
				due = append(due, o)
			} else {
				keep = append(keep, o)
			}
		}
		pending = keep
		for _, o := range due {
			o.do()
		}
		for next < len(plan) && now.Sub(start) >= plan[next].At {
			f := plan[next]
			if carried != nil { // a kind skipped before it was ever applied takes this slot
				f.Kind, f.Hold, carried = carried.Kind, carried.Hold, nil
			}
			more, a := s.apply(f, leader)
			if a == nil && s.injected(f.Kind) == 0 {
				carried = &f
			}
			pending = append(pending, more...)
			if a != nil {
				s.mu.Lock()
				i := len(s.applied)
				s.applied = append(s.applied, *a)
				s.mu.Unlock()
				if s.Process.Holding != nil {
					hold := s.holding(i, a.Owners)
					hold() // now, and again a moment later: a claim the process sent just before the fault may commit after it
					pending = append(pending, owed{at: time.Now().Add(300 * time.Millisecond), do: hold})
				}
			}
			next++
		}
	}
}

// injected is how many faults of kind k were applied.
func (s *Supervisor) injected(k Kind) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Injected[k]
}

// holding adds to the i-th applied fault the keys its owners hold now (outside the lock: it
// queries the database).
func (s *Supervisor) holding(i int, owners []string) func() {
	return func() {
		var keys []string
		for _, o := range owners {
			keys = append(keys, s.Process.Holding(o)...)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, k := range keys {
			if !slices.Contains(s.applied[i].Keys, k) {
				s.applied[i].Keys = append(s.applied[i].Keys, k)
			}
		}
	}
}

func (s *Supervisor) apply(f Fault, leader func() string) ([]owed, *Applied) {
	lead := ""
	if f.AimLeader {
		lead = leader() // outside the lock: it may query the database
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var alive []*proc
	for slot := range s.Slots {
		if p := s.current[slot]; p != nil && p.phase == live {
			alive = append(alive, p)
		}
	}
	cont := func(p *proc) func() {
		return func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if p.phase == stopped {
				s.signal(p, syscall.SIGCONT, "cont", live)
			}
		}
	}
	if f.Kind == StopAll {
		if len(alive) < s.Slots {
			s.Skipped++
			return nil, nil
		}
		s.Injected[StopAll]++
		var out []owed
		a := &Applied{AtMs: time.Now().UnixMilli(), UntilMs: time.Now().Add(f.Hold).UnixMilli(), Kind: StopAll}
		for _, p := range alive {
			s.StopAllStops++
			s.signal(p, syscall.SIGSTOP, "stop", stopped)
			out = append(out, owed{at: time.Now().Add(f.Hold), do: cont(p)})
			a.Owners = append(a.Owners, p.owner)
		}
		return out, a
	}
	if maxFaulted := max(s.MaxFaulted, 1); s.Slots-len(alive) >= maxFaulted || len(alive) == 0 {
		s.Skipped++
		return nil, nil
	}
	p := alive[f.Pick%uint64(len(alive))]
	if f.AimLeader {
		for _, q := range alive {
			if q.owner == lead {
				p = q
				s.Aimed++
			}
		}
	}
	s.Injected[f.Kind]++
	now := time.Now()
	a := &Applied{AtMs: now.UnixMilli(), UntilMs: now.Add(f.Hold).UnixMilli(), Kind: f.Kind, Owners: []string{p.owner}}
	restart := func() {
		<-p.exited
		s.start(p.slot)
	}
	switch f.Kind {
	case Kill:
		s.signal(p, syscall.SIGKILL, "kill", exiting)
		return []owed{{at: time.Now().Add(f.Hold), do: restart}}, a
	case Stop:
		s.signal(p, syscall.SIGSTOP, "stop", stopped)
		return []owed{{at: time.Now().Add(f.Hold), do: cont(p)}}, a
	default:
		s.signal(p, syscall.SIGTERM, "term", exiting)
		a.UntilMs = a.AtMs
		return []owed{{at: time.Now(), do: restart}}, a
	}
}

// StopAll continues every stopped process, stops every one gracefully and waits up to timeout
// for each to exit.
func (s *Supervisor) StopAll(timeout time.Duration) {
	s.mu.Lock()
	var ps []*proc
	for _, p := range s.current {
		if p.phase == stopped {
			s.signal(p, syscall.SIGCONT, "cont", live)
		}
		if p.phase != dead {
			s.signal(p, syscall.SIGTERM, "term", exiting)
			ps = append(ps, p)
		}
	}
	s.mu.Unlock()
	for _, p := range ps {
		select {
		case <-p.exited:
		case <-time.After(timeout):
			s.mu.Lock()
			s.errs = append(s.errs, fmt.Errorf("%s did not stop within %s of SIGTERM", p.owner, timeout))
			s.mu.Unlock()
		}
	}
}

// KillAll is the clean-up: nothing the supervisor started outlives it.
func (s *Supervisor) KillAll() {
	s.mu.Lock()
	for _, p := range s.procs {
		if p.phase != dead && p.cmd.Process != nil {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			_ = p.cmd.Process.Kill()
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Events are the recorded changes, in order.
func (s *Supervisor) Events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Event(nil), s.events...)
}

// Applied are the faults applied, in order, each with the keys its processes held then.
func (s *Supervisor) Applied() []Applied {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Applied(nil), s.applied...)
}

// Started is the number of processes started, restarts included.
func (s *Supervisor) Started() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.procs)
}

// Err joins the problems the supervisor met (a start or a signal that failed).
func (s *Supervisor) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.errs...)
}
