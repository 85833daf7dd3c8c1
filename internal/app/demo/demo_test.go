package demo_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/app/demo"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

func TestMain(m *testing.M) { testpg.Main(m) }

// The demo's replicas start as `qlsched run` starts one (readiness, startup recovery, rounds), its
// progress comes in lines (a log gets no carriage returns), every occurrence is admitted once, and
// the closed loop runs: the dispatcher's workers run the Runs (hello succeeds, flaky is retried
// and fails, the sleeper is cancelled while it runs), the execution audit is clean and no job of
// the demo outlives it.
func TestDemoOnAServerRunsTheClosedLoop(t *testing.T) {
	t.Parallel()
	d := testpg.NewEmpty(t)
	server, err := dbconn.Resolve(d.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := demo.Run(context.Background(), demo.Options{Replicas: 1, Duration: 5 * time.Second, Server: server, Out: &out}); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{"demo-replica-1: ready; startup recovery: 0 candidates", "pg-0001-bootstrap … pg-0029-pooled-plan-settings",
		"control-core is at v28 / pooled_plan_settings", "every occurrence admitted exactly once",
		"dispatcher demo-dispatcher (as ql_runtime): readiness ok", "demo-worker-1: 2 slots", "demo-worker-2: 2 slots",
		"cancelled (was running)", "every invariant holds",
		"  admits    Runs admitted", "  skips     claims ended by the skip misfire policy"} { // the legend

		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if m := regexp.MustCompile(`hello\s+succeeded\s+runs (\d+)\s+attempts (\d+)`).FindStringSubmatch(text); m == nil || m[1] == "0" || m[1] != m[2] {
		t.Errorf("no hello Run succeeded at its first Attempt (%q):\n%s", m, text)
	}
	for _, re := range []string{`retried and failed: run \S+ \(flaky-3s\) failed, attempts 2,`, `cancelled while it ran: run \S+ \(sleep-once\) cancelled, attempts 1,`} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("output lacks %s:\n%s", re, text)
		}
	}
	if strings.Contains(text, "rows break it") || strings.Contains(text, "still live") {
		t.Errorf("the execution audit found a problem, or Runs did not finish:\n%s", text)
	}
	// times are RFC 3339 with their zone: the sleeper's one occurrence and the admitted Runs
	for _, re := range []string{`fires once, at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`, `scheduled \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z `} {
		if !regexp.MustCompile(re).MatchString(text) {
			t.Errorf("output lacks a time in RFC 3339 with its zone (%s):\n%s", re, text)
		}
	}
	if strings.Contains(text, "\r") {
		t.Errorf("output holds a carriage return:\n%q", text)
	}
	db := regexp.MustCompile(`in a new database (qlsched_demo_\d+)`).FindStringSubmatch(text)
	if db == nil {
		t.Fatalf("the output does not name its database:\n%s", text)
	}
	if left := processesMarked(t, db[1]); len(left) > 0 {
		t.Errorf("jobs of the demo still run: pids %v", left)
	}
}

func TestOptionsAreCheckedBeforeAnythingStarts(t *testing.T) {
	t.Parallel()
	for _, o := range []demo.Options{
		{Replicas: 0, Duration: time.Second},
		{Replicas: demo.MaxReplicas + 1, Duration: time.Second},
		{Replicas: 1, Duration: demo.MinDuration - 1},
		{Replicas: 1, Duration: demo.MaxDuration + 1},
	} {
		var out strings.Builder
		o.Out = &out
		if err := demo.Run(context.Background(), o); err == nil || out.Len() != 0 {
			t.Errorf("%+v: err %v, output %q; want an error and nothing started", o, err, out.String())
		}
	}
}

// processesMarked are the pids of the processes whose environment holds the demo's marker,
// QLDEMO_ID=marker: its jobs (and their supervisors), and nothing else.
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

// A database the demo cannot drop on a given server (here a template, which DROP DATABASE refuses)
// is a failure that names it: it holds the workers' token, valid, and the user has to drop it.
func TestDemoFailsWhenItCannotDropItsDatabase(t *testing.T) {
	t.Parallel()
	d := testpg.NewEmpty(t)
	server, err := dbconn.Resolve(d.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(context.Background(), d.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	out := &lockedBuilder{b: &strings.Builder{}}
	done := make(chan error, 1)
	go func() {
		done <- demo.Run(context.Background(), demo.Options{Replicas: 1, Duration: time.Second, Server: server, Out: out})
	}()
	// named from the demo's output: other tests' demos create theirs on the same server
	var name string
	eventually.NoError(t, 60*time.Second, "the demo's database to be named", func() error {
		var m []string
		if m = regexp.MustCompile(`in a new database (qlsched_demo_\d+)`).FindStringSubmatch(out.String()); m == nil {
			return errors.New("not named yet")
		}
		name = m[1]
		return nil
	})
	// the demo's migrations alter the database too: a concurrent update is retried
	eventually.NoError(t, 30*time.Second, "the demo's database to become a template", func() error {
		_, err := conn.Exec(context.Background(), "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" IS_TEMPLATE true")
		return err
	})
	err = <-done
	if err == nil || !strings.Contains(err.Error(), name+" left behind") {
		t.Errorf("demo: %v; want an error naming %s left behind", err, name)
	}
	if strings.Contains(out.String(), "next steps") {
		t.Errorf("the demo ended as a success:\n%s", out.String())
	}
	for _, q := range []string{"ALTER DATABASE " + pgx.Identifier{name}.Sanitize() + " IS_TEMPLATE false", "DROP DATABASE " + pgx.Identifier{name}.Sanitize()} {
		if _, err := conn.Exec(context.Background(), q); err != nil {
			t.Error(err)
		}
	}
}

// lockedBuilder is a writer the test reads while the demo writes to it.
type lockedBuilder struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
