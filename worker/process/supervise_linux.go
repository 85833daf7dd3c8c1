package process

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
)

// SupervisorCommand is the hidden first argument that makes a binary run Supervise (qlworker
// wires it; see Options.Supervisor).
const SupervisorCommand = "__ql-job-supervisor"

// The supervisor's protocol with the worker: signals in, lines on fd 3 out.
const (
	sigStop       = syscall.SIGTERM // forward SIGTERM to the job's group
	sigKill       = syscall.SIGUSR1 // SIGKILL the job's group and every descendant
	sigParentDied = syscall.SIGUSR2 // the supervisor's Pdeathsig: the worker (its forking thread) is gone
	statusFD      = 3
)

// Supervise is the per-job supervisor, a process between the worker and the job:
//
//	<binary> __ql-job-supervisor WORKER_PID PATH -- ARGV…
//
// The worker starts it with Pdeathsig, so the kernel signals it when the worker dies by any
// means (SIGKILL, OOM kill, crash). It makes itself a child subreaper, so a descendant orphaned
// inside the job is re-parented to it rather than to init, and starts the job in a process
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
	status := os.NewFile(statusFD, "status")
	report := func(format string, a ...any) { _, _ = fmt.Fprintf(status, format+"\n", a...) }
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, sigStop, sigKill, sigParentDied, syscall.SIGHUP, syscall.SIGINT)

	if len(args) < 4 || args[2] != "--" {
		report("usage")
		return 125
	}
	ppid, err := strconv.Atoi(args[0])
	if err != nil || os.Getppid() != ppid {
		return 125 // the worker died before the signal handler was armed: start nothing
	}
	path, argv := args[1], args[3:]
	if err := setChildSubreaper(); err != nil {
		report("spawn subreaper")
		return 125
	}
	cmd := &exec.Cmd{Path: path, Args: argv, Stdout: os.Stdout, Stderr: os.Stderr,
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
	pid      int
	spawn    string // the start error's class, if the job did not start
	exit     bool
	waitStat syscall.WaitStatus
}

// readStatus reads the supervisor's status lines until EOF (only the supervisor holds the pipe).
func readStatus(sc *bufio.Scanner, pidSeen func(int)) supStatus {
	var st supStatus
	for sc.Scan() {
		what, arg, _ := strings.Cut(sc.Text(), " ")
		switch what {
		case "pid":
			if n, err := strconv.Atoi(arg); err == nil && n > 0 {
				st.pid = n
				pidSeen(n)
			}
		case "spawn":
			st.spawn = arg
		case "usage":
			st.spawn = "other"
		case "exit":
			if n, err := strconv.ParseUint(arg, 10, 32); err == nil {
				st.exit, st.waitStat = true, syscall.WaitStatus(n)
			}
		}
	}
	return st
}
