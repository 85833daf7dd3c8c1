package process

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// SupervisorCommand is the hidden first argument that makes a binary run Supervise (qlworker
// wires it; see Options.Supervisor).
const SupervisorCommand = "__ql-job-supervisor"

// The supervisor's protocol with the worker: the job's message in on fd 4, signals in, lines on
// fd 3 out.
const (
	sigStop       = syscall.SIGTERM // forward SIGTERM to the job's group
	sigKill       = syscall.SIGUSR1 // SIGKILL the job's group and every descendant
	sigParentDied = syscall.SIGUSR2 // the supervisor's Pdeathsig: the worker (its forking thread) is gone
	statusFD      = 3
	specFD        = 4
)

// Supervise is the per-job supervisor, a process between the worker and the job:
//
//	<binary> __ql-job-supervisor WORKER_PID
//
// The worker starts it with Pdeathsig, so the kernel signals it when the worker dies by any
// means (SIGKILL, OOM kill, crash). It makes itself a child subreaper, so a descendant orphaned
// inside the job is re-parented to it rather than to init. Then it waits, idle, for the job's
// message on fd 4 (encodeJob: path, dir, argv, env; the worker writes it and closes the pipe):
// a worker may start it long before the job (a pre-started supervisor). The worker's death or a
// stop or kill signal while it waits ends it; EOF without a message ends it quietly (exit 0). It
// reports "spec" on fd 3 once it has the message, and starts the job in spec's dir in a process
// group of its own. On the worker's death or the worker's kill signal it SIGKILLs the group and
// every descendant it can see; when the job's leader exits it does the same to the strays
// (nothing of an attempt runs on without a lease), then reports the leader's wait status on fd 3.
// It writes nothing to stdout or stderr: they are the job's output. It returns the exit code.
func Supervise(args []string) int {
	// The job's Pdeathsig is tied to the thread that forks it: this goroutine keeps its thread
	// until the process exits.
	runtime.LockOSThread()
	// Inherited without close-on-exec: the job must not hold the status pipe (the worker reads it
	// to its end, which would then wait for a descendant that outlived the supervisor).
	syscall.CloseOnExec(statusFD)
	syscall.CloseOnExec(specFD)
	status := os.NewFile(statusFD, "status")
	report := func(format string, a ...any) { _, _ = fmt.Fprintf(status, format+"\n", a...) }
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, sigStop, sigKill, sigParentDied, syscall.SIGHUP, syscall.SIGINT)

	if len(args) != 1 {
		report("usage")
		return 125
	}
	ppid, err := strconv.Atoi(args[0])
	if err != nil || os.Getppid() != ppid {
		return 125 // the worker died before the signal handler was armed: start nothing
	}
	if err := setChildSubreaper(); err != nil {
		report("spawn subreaper")
		return 125
	}
	// Idle, it holds no job: the worker's death SIGKILLs it, which ends it even stopped (SIGSTOP),
	// when no other signal would (a stopped idle supervisor would outlive the worker).
	if err := setParentDeathSignal(syscall.SIGKILL); err != nil {
		report("spawn pdeathsig")
		return 125
	}

	// Idle until the job's message comes.
	type message struct {
		b   []byte
		err error
	}
	got := make(chan message, 1)
	go func() {
		spec := os.NewFile(specFD, "spec")
		b, err := io.ReadAll(spec)
		spec.Close()
		got <- message{b, err}
	}()
	var msg message
	for waiting := true; waiting; {
		select {
		case msg = <-got:
			waiting = false
		case s := <-sigs:
			switch s {
			case sigStop, sigKill, sigParentDied: // no job yet: nothing to stop but this process
				return 125
			}
		}
	}
	if msg.err == nil && len(msg.b) == 0 {
		return 0 // the worker closed the pipe without a job (it stopped): nothing to do
	}
	// With a job, the worker's death must reach the handler below, which kills the job's tree.
	// Dead before that, it killed this process; dead already, it gets no job started.
	if err := setParentDeathSignal(sigParentDied); err != nil || os.Getppid() != ppid {
		return 125
	}
	path, dir, argv, env, err := decodeJob(msg.b)
	if msg.err != nil || err != nil {
		report("usage")
		return 125
	}
	report("spec")
	cmd := &exec.Cmd{Path: path, Args: argv, Env: env, Dir: dir, Stdout: os.Stdout, Stderr: os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}}
	if err := cmd.Start(); err != nil {
		report("spawn %s", spawnClass(err))
		return 127
	}
	pgid := cmd.Process.Pid
	report("pid %d", pgid)
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	for {
		select {
		case <-exited:
			sweep(pgid) // strays of a leader that exited
			ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			report("exit %d", uint32(ws))
			return 0
		case s := <-sigs:
			switch s {
			case sigStop:
				_ = syscall.Kill(-pgid, syscall.SIGTERM)
			case sigKill, sigParentDied:
				killDescendants(pgid)
			}
		}
	}
}

// encodeJob is the job's message to its supervisor: the path, the dir, the number of arguments,
// the number of env entries, the argv and the env, each ended by a NUL byte (none of them may
// hold one: the kernel's execve could not pass it either). Binary, not JSON: an env entry of the
// worker's own env need not be UTF-8. The counts make a message cut short detectable even where
// the cut falls after a NUL (a worker that died or gave up in the middle of a message beyond the
// pipe's buffer): such a message is refused, never run with part of its argv or env.
func encodeJob(path, dir string, argv, env []string) ([]byte, error) {
	n := len(path) + len(dir) + 16
	fields := append(append([]string{path, dir, strconv.Itoa(len(argv)), strconv.Itoa(len(env))}, argv...), env...)
	for _, f := range fields {
		if strings.IndexByte(f, 0) >= 0 {
			return nil, syscall.EINVAL
		}
		n += len(f) + 1
	}
	b := make([]byte, 0, n)
	for _, f := range fields {
		b = append(append(b, f...), 0)
	}
	return b, nil
}

// decodeJob reads encodeJob's message, and refuses one that is not exactly that.
func decodeJob(b []byte) (path, dir string, argv, env []string, err error) {
	if len(b) == 0 || b[len(b)-1] != 0 {
		return "", "", nil, nil, errors.New("a cut message")
	}
	f := strings.Split(string(b[:len(b)-1]), "\x00")
	if len(f) < 4 {
		return "", "", nil, nil, errors.New("a short message")
	}
	argc, err := strconv.Atoi(f[2])
	if err != nil || argc < 1 || argc > len(f)-4 {
		return "", "", nil, nil, errors.New("a bad argument count")
	}
	envc, err := strconv.Atoi(f[3])
	if err != nil || envc != len(f)-4-argc {
		return "", "", nil, nil, errors.New("a bad env count (a cut message)")
	}
	return f[0], f[1], f[4 : 4+argc], f[4+argc:], nil
}

// setParentDeathSignal sets the calling thread's parent-death signal: the kernel sends the
// process each of its threads' one when the worker's forking thread dies (Supervise keeps its
// thread locked, so both calls set the same thread's).
func setParentDeathSignal(sig syscall.Signal) error {
	const prSetPdeathsig = 1
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetPdeathsig, uintptr(sig), 0); e != 0 {
		return e
	}
	return nil
}

func setChildSubreaper() error {
	const prSetChildSubreaper = 36
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); e != 0 {
		return e
	}
	return nil
}

// killDescendants SIGKILLs the job's group and every child of this process (a descendant that
// left the group is re-parented here once its parent dies, and is found by a later call).
func killDescendants(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	for _, pid := range children() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// sweep kills the job's group and every descendant, and reaps them all. A job that left
// nothing behind costs no /proc scan (children reads every process's stat: most of a short
// job's cost on a busy host): the leader has been reaped, and its exit re-parented each of its
// live children here before that wait returned, so no child at all (ECHILD) means no
// descendant at all.
func sweep(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR) || (err == nil && pid > 0):
			continue // reaped one: its children, if any, are this process's now
		case errors.Is(err, syscall.ECHILD): // nothing left
			return
		}
		reapDescendants() // children alive (a stray outside the group, or one still dying), or an error: the walk decides
		return
	}
}

// reapDescendants kills and reaps children until none is left: each death re-parents that
// child's own children here (the subreaper), so the whole tree goes, generation by generation.
func reapDescendants() {
	for {
		for _, pid := range children() {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		var ws syscall.WaitStatus
		_, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.ECHILD) {
			return
		}
		if err != nil && !errors.Is(err, syscall.EINTR) {
			return
		}
	}
}

// children are the pids whose parent is this process, from /proc.
func children() []int {
	self := os.Getpid()
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	var out []int
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + n + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses: cut at the last ')'.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 {
			if ppid, err := strconv.Atoi(f[1]); err == nil && ppid == self {
				out = append(out, pid)
			}
		}
	}
	return out
}

// spawnClass is a start error as one word for the status line (no path: it is the spec's).
func spawnClass(err error) string {
	switch {
	case errors.Is(err, exec.ErrNotFound):
		return "notfound"
	case errors.Is(err, os.ErrNotExist):
		return "noent"
	case errors.Is(err, os.ErrPermission):
		return "perm"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return "errno" + strconv.Itoa(int(errno))
	}
	return "other"
}

// spawnReason is the message of a start error: the cause, never the path os/exec quotes.
func spawnReason(class string) string {
	switch class {
	case "notfound":
		return "not found in $PATH"
	case "noent":
		return "no such file or directory (the program or the dir)"
	case "perm":
		return "permission denied"
	}
	if n, ok := strings.CutPrefix(class, "errno"); ok {
		if e, err := strconv.Atoi(n); err == nil {
			return syscall.Errno(e).Error()
		}
	}
	return "the system refused to start it"
}

// supStatus is what the supervisor reported on its status pipe.
type supStatus struct {
	accepted bool // it has the job's message
	pid      int
	spawn    string // the start error's class, if the job did not start
	exit     bool
	waitStat syscall.WaitStatus
}

// statusReader reads a supervisor's status lines until EOF (only the supervisor holds the
// pipe), in a goroutine of its own.
type statusReader struct {
	pgid     atomic.Int64  // the job's group, once reported
	accepted chan struct{} // closed when the supervisor has the job's message
	done     chan struct{} // closed at EOF; st is then set
	st       supStatus
}

func readStatus(f *os.File) *statusReader {
	r := &statusReader{accepted: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			what, arg, _ := strings.Cut(sc.Text(), " ")
			switch what {
			case "spec":
				if !r.st.accepted {
					r.st.accepted = true
					close(r.accepted)
				}
			case "pid":
				if n, err := strconv.Atoi(arg); err == nil && n > 0 {
					r.st.pid = n
					r.pgid.Store(int64(n))
				}
			case "spawn":
				r.st.spawn = arg
			case "usage":
				r.st.spawn = "other"
			case "exit":
				if n, err := strconv.ParseUint(arg, 10, 32); err == nil {
					r.st.exit, r.st.waitStat = true, syscall.WaitStatus(n)
				}
			}
		}
	}()
	return r
}

// endedWithoutAccepting reports whether the supervisor has closed the pipe without having
// accepted the job's message (it then started nothing).
func (r *statusReader) endedWithoutAccepting() bool {
	select {
	case <-r.done:
		return !r.st.accepted
	default:
		return false
	}
}

// wait is the status once the supervisor has closed the pipe.
func (r *statusReader) wait() supStatus {
	<-r.done
	return r.st
}
