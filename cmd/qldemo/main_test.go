package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/testkit/dbconntest"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/testbin"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

func TestMain(m *testing.M) { testpg.Main(m) }

func qldemo(t *testing.T) string { return testbin.Command(t, "qldemo") }

func run(t *testing.T, args ...string) testbin.Result {
	t.Helper()
	return testbin.Run(t, exec.Command(qldemo(t), args...))
}

// Bad input is exit 2 before anything starts: no connection to a given server (the listener
// counts them), nothing on stdout, so no throwaway server either.
func TestBadInputExits2BeforeConnecting(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--replicas", "9"}, "--replicas 9: want 1 … 8"},
		{[]string{"--replicas", "0"}, "--replicas 0"},
		{[]string{"--duration", "0s"}, "--duration 0s"},
		{[]string{"--duration", "11m"}, "--duration 11m0s"},
		{[]string{"--format", "json"}, "--format json: qldemo prints progress lines"},
		{[]string{"extra"}, "takes no arguments"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			t.Parallel()
			ln := dbconntest.Listen(t)
			r := run(t, append(c.args, "--database-url", "postgres://u:pw-never-shown@"+ln.Addr()+"/x?connect_timeout=2")...)
			if r.Code != 2 || !strings.Contains(r.Stderr, c.want) || r.Stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 mentioning %q and nothing on stdout", r.Code, r.Stdout, r.Stderr, c.want)
			}
			if n := ln.Accepted(); n != 0 {
				t.Errorf("%d connection(s) opened; want none", n)
			}
			if strings.Contains(r.Stdout+r.Stderr, "pw-never-shown") {
				t.Error("the password leaked")
			}
		})
	}
}

// Given --database-url, the demo runs on that server in a database of its own, as each of the four
// roles, and drops that database at the end; QL_DATABASE_URL alone never sends it there.
func TestDemoOnAGivenServer(t *testing.T) {
	t.Parallel()
	d := testpg.NewEmpty(t)
	r := run(t, "--duration", "3s", "--database-url", d.URL(""))
	if r.Code != 0 || !strings.Contains(r.Stdout, "every occurrence admitted exactly once") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
	m := regexp.MustCompile(`in a new database (qlsched_demo_\d+)`).FindStringSubmatch(r.Stdout)
	if m == nil || strings.Contains(r.Stdout, "starting a throwaway PostgreSQL") {
		t.Fatalf("the demo did not use the given server:\n%s", r.Stdout)
	}
	conn, err := pgx.Connect(context.Background(), d.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var left int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM pg_database WHERE datname = $1", m[1]).Scan(&left); err != nil || left != 0 {
		t.Errorf("database %s: %d left (%v); want it dropped", m[1], left, err)
	}

	// an empty flag is a usage error, not a fall-back to QL_DATABASE_URL or PG*
	if r := run(t, "--database-url", ""); r.Code != 2 || !strings.Contains(r.Stderr, "--database-url is empty") {
		t.Errorf("--database-url '': exit %d, stderr %q; want exit 2 saying it is empty", r.Code, r.Stderr)
	}

	// the environment is not a given URL: the demo starts a throwaway server of its own
	cmd := exec.Command(qldemo(t), "--duration", "1s")
	cmd.Env = append(os.Environ(), "QL_DATABASE_URL="+d.URL(""))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "starting a throwaway PostgreSQL") {
		t.Errorf("with QL_DATABASE_URL only: %v; want exit 0 from a demo on a server of its own:\n%s", err, out)
	}
}

var (
	removingDir = regexp.MustCompile(`removing (\S+)`)
	dataDir     = regexp.MustCompile(`data in (\S+)`)
)

// The demo runs the closed loop end to end on its own throwaway PostgreSQL and leaves nothing
// behind: not when it finishes, not when it is interrupted while a worker runs a job (the job,
// under the demo's supervisor, is stopped too).
func TestDemoCleansUpAfterItselfAlsoOnCtrlC(t *testing.T) {
	t.Parallel()
	for _, interrupt := range []bool{false, true} {
		t.Run(fmt.Sprintf("interrupt=%v", interrupt), func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(qldemo(t), "--duration", "5s")
			out := &syncBuffer{}
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if interrupt {
				eventually.NoError(t, 60*time.Second, "a worker of the demo to run the sleeper", func() error {
					if o := out.String(); !strings.Contains(o, "is running on a worker: cancelling it in 1s") {
						return fmt.Errorf("output so far:\n%s", o)
					}
					return nil
				})
				m := dataDir.FindStringSubmatch(out.String())
				if m == nil {
					t.Fatalf("the demo did not name its data directory:\n%s", out.String())
				}
				// the Run is running once its offer is ACKed; the worker spawns the job after that
				eventually.NoError(t, 30*time.Second, "the sleeper's job to run (else the check below would prove nothing)", func() error {
					if jobs := processesMarked(t, m[1]); len(jobs) == 0 {
						return fmt.Errorf("no process marked QLDEMO_ID=%s yet", m[1])
					}
					return nil
				})
				if err := cmd.Process.Signal(os.Interrupt); err != nil {
					t.Fatalf("interrupt the demo: %v", err)
				}
			}
			err := cmd.Wait()
			code := cmd.ProcessState.ExitCode()
			switch {
			case !interrupt && (err != nil || !strings.Contains(out.String(), "every occurrence admitted exactly once")):
				t.Fatalf("demo: exit %d\n%s", code, out.String())
			case interrupt && code != 130:
				t.Fatalf("interrupted demo: exit %d, want 130\n%s", code, out.String())
			case !interrupt:
				for _, re := range []string{`hello\s+succeeded\s+runs [1-9]`, `retried and failed: run \S+ \(flaky-3s\) failed, attempts 2,`,
					`cancelled while it ran: run \S+ \(sleep-once\) cancelled, attempts 1,`, `every invariant holds`} {
					if !regexp.MustCompile(re).MatchString(out.String()) {
						t.Errorf("output lacks %s:\n%s", re, out.String())
					}
				}
			}
			m := removingDir.FindStringSubmatch(out.String())
			if m == nil {
				t.Fatalf("the demo did not say what it removed:\n%s", out.String())
			}
			cluster := filepath.Dir(m[1])
			if _, err := os.Stat(cluster); !os.IsNotExist(err) {
				t.Errorf("interrupt=%v: %s still exists (%v)", interrupt, cluster, err)
			}
			if ps, _ := exec.Command("pgrep", "-f", m[1]).Output(); len(bytes.TrimSpace(ps)) > 0 {
				t.Errorf("interrupt=%v: a process still runs on %s: %s", interrupt, m[1], ps)
			}
			if jobs := processesMarked(t, m[1]); len(jobs) > 0 {
				t.Errorf("interrupt=%v: jobs of the demo still run: pids %v", interrupt, jobs)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer the test may read while the child process writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// processesMarked are the pids of the processes whose environment holds the demo's marker,
// QLDEMO_ID=marker (its data directory): its jobs and their supervisors, nothing else.
func processesMarked(t *testing.T, marker string) []string {
	t.Helper()
	procs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	want := []byte("QLDEMO_ID=" + marker + "\x00")
	var pids []string
	for _, p := range procs {
		if p.Name()[0] < '0' || p.Name()[0] > '9' {
			continue
		}
		env, err := os.ReadFile("/proc/" + p.Name() + "/environ")
		if err == nil && bytes.Contains(env, want) {
			pids = append(pids, p.Name())
		}
	}
	return pids
}

// A hang-up (the terminal closed, the ssh session dropped) is an interrupt: the demo removes its
// throwaway server and data directory instead of dying with them left behind.
func TestHangUpRemovesWhatTheDemoStarted(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(qldemo(t), "--duration", "5s")
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var dir string
	eventually.NoError(t, 60*time.Second, "the demo's server to start", func() error {
		m := dataDir.FindStringSubmatch(out.String())
		if m == nil {
			return fmt.Errorf("output so far:\n%s", out.String())
		}
		dir = m[1]
		return nil
	})
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatalf("hang up on the demo: %v", err)
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("hung-up demo: exit %d (%v), want 130\n%s", code, cmd.ProcessState, out.String())
	}
	if _, err := os.Stat(filepath.Dir(dir)); !os.IsNotExist(err) {
		t.Errorf("%s still exists (%v)\n%s", filepath.Dir(dir), err, out.String())
	}
	if ps, _ := exec.Command("pgrep", "-f", dir).Output(); len(bytes.TrimSpace(ps)) > 0 {
		t.Errorf("a process still runs on %s: %s", dir, ps)
	}
}
