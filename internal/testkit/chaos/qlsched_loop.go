package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/app/pgcluster"
	"github.com/qlcontrol/controlcore/schedule"
)

// QlschedLoop is qlsched's whole loop under the soak: the database of PrepareQlsched, whose task
// runs command (a job that appends one line per execution, ExecLog), a worker token in a file,
// and D dispatcher addresses fixed up front, so that a restarted dispatcher listens where the
// workers look for it.
type QlschedLoop struct {
	*Qlsched
	TokenFile     string
	Dispatchers   []string // worker protocol addresses, host:port, one per dispatcher slot
	DispatchLease time.Duration
}

// PrepareQlschedLoop is PrepareQlsched for the whole loop: the task runs command (at most three
// Attempts, no backoff), a worker token is written to dir, and d loopback ports are chosen.
func PrepareQlschedLoop(ctx context.Context, c *pgcluster.Cluster, database string, n, d int, command []string, dir string) (*QlschedLoop, error) {
	spec, err := json.Marshal(map[string]any{"command": command, "timeout": "1m"})
	if err != nil {
		return nil, err
	}
	noBackoff := time.Duration(0)
	l := &QlschedLoop{TokenFile: filepath.Join(dir, "worker-token"), DispatchLease: 5 * time.Second}
	q, err := prepareQlsched(ctx, c, database, n, schedule.MinMisfireGrace, admin.TaskSpec{ExecutorSpec: spec, MaxAttempts: 3, RetryBackoff: &noBackoff},
		func(pub *admin.Publisher) error {
			tok, err := pub.CreateWorkerToken(ctx, "chaos")
			if err != nil {
				return err
			}
			return os.WriteFile(l.TokenFile, []byte(tok.Token+"\n"), 0o600)
		})
	if err != nil {
		return nil, err
	}
	l.Qlsched = q
	for range d {
		ln, err := net.Listen("tcp", "127.0.0.1:0") // a free port, given back for the dispatcher
		if err != nil {
			q.Su.Close()
			return nil, err
		}
		l.Dispatchers = append(l.Dispatchers, ln.Addr().String())
		ln.Close()
	}
	return l, nil
}

// DispatcherProcess is `qlsched dispatch` of bin; owners are "<prefix><slot>-i<n>", slot from 1,
// and slot k listens on Dispatchers[k-1].
func (l *QlschedLoop) DispatcherProcess(bin, prefix string) Process {
	return Process{
		Command: func(owner string) *exec.Cmd {
			slot, _ := strconv.Atoi(strings.TrimPrefix(strings.SplitN(owner, "-", 2)[0], prefix))
			cmd := exec.Command(bin, "dispatch", "--owner", owner, "--listen", l.Dispatchers[slot-1], "--http-addr", "127.0.0.1:0",
				"--lease", l.DispatchLease.String(), "--sweep-interval", "500ms", "--offer-ttl", "2s", "--poll-max-wait", "2s",
				"--log-format", "json")
			cmd.Env = append(os.Environ(), "QL_DATABASE_URL="+l.RuntimeURL)
			return cmd
		},
		Ready: func(line []byte) bool { return JSONMsg(line) == "dispatcher running" },
	}
}

// WorkerProcess is qlworker bin named after its owner, with every dispatcher and a capacity.
func (l *QlschedLoop) WorkerProcess(bin string, capacity int) Process {
	urls := make([]string, len(l.Dispatchers))
	for i, a := range l.Dispatchers {
		urls[i] = "http://" + a
	}
	return Process{
		Command: func(owner string) *exec.Cmd {
			return exec.Command(bin, "--dispatcher", strings.Join(urls, ","), "--token-file", l.TokenFile, "--name", owner,
				"--capacity", strconv.Itoa(capacity), "--drain-grace", "3s", "--log-format", "json")
		},
		Ready: func(line []byte) bool { return JSONMsg(line) == "session registered" },
	}
}

// WorkerHolder is a worker running an Attempt now, "" if none.
func (l *QlschedLoop) WorkerHolder(ctx context.Context) string {
	var name string
	_ = l.Su.QueryRow(ctx, `SELECT s.worker_id FROM control_core.attempts a
		JOIN control_core.worker_sessions s USING (worker_session_id)
		WHERE a.state = 'running' AND s.state = 'active' LIMIT 1`).Scan(&name)
	return name
}

// Executions reads the job's execution log, lines "run_id attempt_no unix_ms", and gives each
// execution its Run's trigger and scheduled second. Lines of Runs the database does not know
// are an error.
func (l *QlschedLoop) Executions(ctx context.Context, logPath string) ([]Execution, error) {
	data, err := os.ReadFile(logPath)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	rows, err := l.Su.Query(ctx, "SELECT run_id::text, trigger_id, scheduled_for_ms FROM control_core.runs")
	if err != nil {
		return nil, err
	}
	type occ struct {
		key string
		sec int64
	}
	runs := map[string]occ{}
	var id string
	var o occ
	if _, err := pgx.ForEachRow(rows, []any{&id, &o.key, &o.sec}, func() error { runs[id] = o; return nil }); err != nil {
		return nil, err
	}
	var out []Execution
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("execution log: %q: want run_id attempt_no unix_ms", line)
		}
		at, err := strconv.ParseInt(f[2], 10, 64)
		r, ok := runs[f[0]]
		if err != nil || !ok {
			return nil, fmt.Errorf("execution log: %q: no such Run or a bad time", line)
		}
		out = append(out, Execution{Key: r.key, SecondMs: r.sec, AtMs: at})
	}
	return out, nil
}
