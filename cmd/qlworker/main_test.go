package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
	"github.com/qlcontrol/controlcore/internal/testkit/testbin"
	"github.com/qlcontrol/controlcore/workerproto"
)

const token = "qlw_s3cr3t-t0ken"

func TestMain(m *testing.M) {
	// testbin builds under TMPDIR: a scratch folder of this test binary, removed at exit.
	dir, err := os.MkdirTemp("", "qlworker-test-")
	if err != nil {
		panic(err)
	}
	os.Setenv("TMPDIR", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func tokenFile(t *testing.T, content string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// Bad usage exits 2 with a clear message before any connection (the dispatcher URL is a closed
// port: nothing may try it), and never prints the token.
func TestUsageErrors(t *testing.T) {
	bin := testbin.Command(t, "qlworker")
	good := tokenFile(t, token+"\n", 0o600)
	d := "http://127.0.0.1:1"
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no dispatcher", []string{"--token-file", good, "--name", "w1"}, "--dispatcher is required"},
		{"no token file", []string{"--dispatcher", d, "--name", "w1"}, "--token-file is required"},
		{"missing token file", []string{"--dispatcher", d, "--name", "w1", "--token-file", "/no/such/file"}, "--token-file: open: no such file"},
		{"empty token file", []string{"--dispatcher", d, "--name", "w1", "--token-file", tokenFile(t, "\n", 0o600)}, "the file is empty"},
		{"not a token", []string{"--dispatcher", d, "--name", "w1", "--token-file", tokenFile(t, "hunter2 x", 0o600)}, "does not hold one worker token"},
		{"bad name", []string{"--dispatcher", d, "--name", "Worker One", "--token-file", good}, "--name (10 characters, not shown)"},
		{"no name", []string{"--dispatcher", d, "--token-file", good}, "--name"},
		{"capacity 0", []string{"--dispatcher", d, "--name", "w1", "--token-file", good, "--capacity", "0"}, "--capacity 0: want 1…256"},
		{"capacity word", []string{"--dispatcher", d, "--name", "w1", "--token-file", good, "--capacity", "many"}, "bad value for --capacity"},
		{"bad label", []string{"--dispatcher", d, "--name", "w1", "--token-file", good, "--label", "gpu"}, "want key=value"},
		{"bad drain grace", []string{"--dispatcher", d, "--name", "w1", "--token-file", good, "--drain-grace", "10ms"}, "--drain-grace 10ms"},
		{"bad url", []string{"--dispatcher", "ftp://x", "--name", "w1", "--token-file", good}, "--dispatcher: dispatcher URL 1 of 1"},
		{"url with password", []string{"--dispatcher", "http://u:pw@h", "--name", "w1", "--token-file", good}, "holds credentials"},
		{"plaintext to another host", []string{"--dispatcher", "http://192.0.2.1:8443", "--name", "w1", "--token-file", good}, "is http:// to host \"192.0.2.1\", not loopback"},
		{"unknown flag", []string{"--dispatcher", d, "--name", "w1", "--token-file", good, "--shell"}, "unknown flag --shell"},
		{"bad ca file", []string{"--dispatcher", d, "--name", "w1", "--token-file", good, "--ca-file", good}, "--ca-file: no PEM certificate"},
		{"bad log level", []string{"--dispatcher", d, "--name", "w1", "--token-file", good, "--log-level", "loud"}, "--log-level \"loud\""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := testbin.Run(t, exec.Command(bin, tc.args...))
			if r.Code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", r.Code, r.Stderr)
			}
			if !strings.Contains(r.Stderr, tc.want) {
				t.Fatalf("stderr %q does not say %q", r.Stderr, tc.want)
			}
			for _, secret := range []string{"s3cr3t", "hunter2", "pw@"} {
				if strings.Contains(r.Stdout+r.Stderr, secret) {
					t.Fatalf("output holds %q:\n%s%s", secret, r.Stdout, r.Stderr)
				}
			}
		})
	}
}

func TestHelpExplains(t *testing.T) {
	r := testbin.Run(t, exec.Command(testbin.Command(t, "qlworker"), "--help"))
	if r.Code != 0 {
		t.Fatalf("--help exit %d", r.Code)
	}
	for _, want := range []string{"--dispatcher", "--token-file", "--capacity", "--label", "--drain-grace", "--ca-file", "never through a", "second signal", "Exit codes"} {
		if !strings.Contains(r.Stdout, strings.TrimPrefix(want, "-")) {
			t.Errorf("--help does not mention %q:\n%s", want, r.Stdout)
		}
	}
}

// The wiring end to end, against a minimal fake of protocol v1: the binary registers, runs the
// offered command as a process, reports it, and drains and closes on SIGTERM (exit 0). The real
// dispatcher's end-to-end gates are internal/testkit/faults' (issue 32, W6).
func TestRunsAJobAndDrainsOnSIGTERM(t *testing.T) {
	var (
		mu        sync.Mutex
		calls     []string
		completes []workerproto.CompleteRequest
		offered   bool
	)
	record := func(c string) { mu.Lock(); calls = append(calls, c); mu.Unlock() }
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("POST /v1/sessions", func(w http.ResponseWriter, r *http.Request) {
		var req workerproto.RegisterRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		record("register " + req.Name + " " + req.Labels["zone"])
		reply(w, 201, workerproto.RegisterResponse{SessionID: "s1", HeartbeatIntervalMs: 200, LeaseTTLMs: 30000, PollMaxWaitMs: 200, OutputTailMaxBytes: 8192})
	})
	mux.HandleFunc("POST /v1/sessions/s1/poll", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		first := !offered
		offered = true
		mu.Unlock()
		resp := workerproto.PollResponse{Offers: []workerproto.Offer{}}
		if first {
			resp.Offers = append(resp.Offers, workerproto.Offer{OfferID: "o1", AttemptID: "a1", RunID: "r1", AttemptNo: 1, MaxAttempts: 1,
				CallbackToken: "qlc_cb", ExpiresInMs: 10000, Project: "p", Task: "t", TaskRevision: 1,
				Spec: json.RawMessage(`{"command":["sh","-c","echo \"run $QL_RUN_ID\"; exit 0"],"timeout":"10s"}`)})
		} else {
			time.Sleep(100 * time.Millisecond) // a long poll that finds nothing
		}
		reply(w, 200, resp)
	})
	mux.HandleFunc("POST /v1/offers/o1/ack", func(w http.ResponseWriter, r *http.Request) {
		record("ack")
		reply(w, 200, workerproto.AckResponse{LeaseVersion: 1, LeaseExpiresInMs: 30000, HeartbeatIntervalMs: 200})
	})
	mux.HandleFunc("POST /v1/sessions/s1/heartbeat", func(w http.ResponseWriter, r *http.Request) {
		var req workerproto.HeartbeatRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		resp := workerproto.HeartbeatResponse{SessionExpiresInMs: 30000, Leases: []workerproto.LeaseStatus{}}
		for _, l := range req.Leases {
			resp.Leases = append(resp.Leases, workerproto.LeaseStatus{AttemptID: l.AttemptID, Status: "renewed", LeaseExpiresInMs: 30000})
		}
		reply(w, 200, resp)
	})
	mux.HandleFunc("POST /v1/attempts/a1/complete", func(w http.ResponseWriter, r *http.Request) {
		var req workerproto.CompleteRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		completes = append(completes, req)
		mu.Unlock()
		record("complete")
		reply(w, 200, workerproto.CompleteResponse{RunState: "succeeded"})
	})
	mux.HandleFunc("POST /v1/sessions/s1/drain", func(w http.ResponseWriter, r *http.Request) {
		record("drain")
		reply(w, 200, workerproto.DrainResponse{})
	})
	mux.HandleFunc("DELETE /v1/sessions/s1", func(w http.ResponseWriter, r *http.Request) {
		record("close")
		w.WriteHeader(204)
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			reply(w, 401, workerproto.ErrorBody{Error: workerproto.ErrorDetail{Code: "unauthorized"}})
			return
		}
		mux.ServeHTTP(w, r)
	}))
	defer srv.Close()

	cmd := exec.Command(testbin.Command(t, "qlworker"), "--dispatcher", "http://127.0.0.1:1,"+srv.URL,
		"--token-file", tokenFile(t, token, 0o600), "--name", "w1", "--label", "zone=a", "--log-level", "debug")
	var stderr strings.Builder
	var errMu sync.Mutex
	cmd.Stderr = writerFunc(func(p []byte) (int, error) { errMu.Lock(); defer errMu.Unlock(); return stderr.Write(p) })
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 20*time.Second, "the job's report", func() bool { mu.Lock(); defer mu.Unlock(); return len(completes) == 1 })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	errMu.Lock()
	logs := stderr.String()
	errMu.Unlock()
	if err != nil {
		t.Fatalf("qlworker after SIGTERM: %v\n%s", err, logs)
	}
	mu.Lock()
	defer mu.Unlock()
	c := completes[0]
	if c.Outcome != "succeeded" || c.OutputTail != "run r1\n" || c.CallbackToken != "qlc_cb" {
		t.Fatalf("completion = %+v", c)
	}
	want := []string{"register w1 a", "ack", "complete", "drain", "close"}
	if strings.Join(calls, ",") != strings.Join(want, ",") {
		t.Fatalf("calls = %v, want %v", calls, want)
	}
	if strings.Contains(logs, "s3cr3t") || strings.Contains(logs, "qlc_cb") {
		t.Fatalf("the logs hold a token:\n%s", logs)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// fakeDispatcher serves protocol v1 minimally: one session, one offer of spec, leases renewed.
// It returns its URL and the completions it received.
func fakeDispatcher(t *testing.T, spec string) (string, func() []workerproto.CompleteRequest) {
	var (
		mu        sync.Mutex
		offered   bool
		completes []workerproto.CompleteRequest
	)
	reply := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sessions", func(w http.ResponseWriter, r *http.Request) {
		reply(w, 201, workerproto.RegisterResponse{SessionID: "s1", HeartbeatIntervalMs: 200, LeaseTTLMs: 30000, PollMaxWaitMs: 200, OutputTailMaxBytes: 8192})
	})
	mux.HandleFunc("POST /v1/sessions/s1/poll", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		first := !offered
		offered = true
		mu.Unlock()
		resp := workerproto.PollResponse{Offers: []workerproto.Offer{}}
		if first {
			resp.Offers = append(resp.Offers, workerproto.Offer{OfferID: "o1", AttemptID: "a1", RunID: "r1", AttemptNo: 1, MaxAttempts: 1,
				CallbackToken: "qlc_cb", ExpiresInMs: 10000, Project: "p", Task: "t", TaskRevision: 1, Spec: json.RawMessage(spec)})
		} else {
			time.Sleep(100 * time.Millisecond)
		}
		reply(w, 200, resp)
	})
	mux.HandleFunc("POST /v1/offers/o1/ack", func(w http.ResponseWriter, r *http.Request) {
		reply(w, 200, workerproto.AckResponse{LeaseVersion: 1, LeaseExpiresInMs: 30000, HeartbeatIntervalMs: 200})
	})
	mux.HandleFunc("POST /v1/sessions/s1/heartbeat", func(w http.ResponseWriter, r *http.Request) {
		var req workerproto.HeartbeatRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		resp := workerproto.HeartbeatResponse{SessionExpiresInMs: 30000, Leases: []workerproto.LeaseStatus{}}
		for _, l := range req.Leases {
			resp.Leases = append(resp.Leases, workerproto.LeaseStatus{AttemptID: l.AttemptID, Status: "renewed", LeaseExpiresInMs: 30000})
		}
		reply(w, 200, resp)
	})
	mux.HandleFunc("POST /v1/attempts/a1/complete", func(w http.ResponseWriter, r *http.Request) {
		var req workerproto.CompleteRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		completes = append(completes, req)
		mu.Unlock()
		reply(w, 200, workerproto.CompleteResponse{RunState: "failed"})
	})
	mux.HandleFunc("POST /v1/sessions/s1/drain", func(w http.ResponseWriter, r *http.Request) { reply(w, 200, workerproto.DrainResponse{}) })
	mux.HandleFunc("DELETE /v1/sessions/s1", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL, func() []workerproto.CompleteRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]workerproto.CompleteRequest(nil), completes...)
	}
}

// jobSecret is an env value of the specs below: no piece of it may reach qlworker's logs.
const jobSecret = "Zq9xK7wPv3Lm"

// treeSpec is a job that starts a grandchild ignoring SIGTERM and writes both pids to files.
func treeSpec(t *testing.T, timeout string) (spec, childFile, grandchildFile string) {
	dir := t.TempDir()
	childFile, grandchildFile = filepath.Join(dir, "child"), filepath.Join(dir, "grandchild")
	s := map[string]any{
		"command": []string{"sh", "-c", `trap '' TERM; sleep 300 & echo $! > "$2"; echo $$ > "$1"; wait`, "sh", childFile, grandchildFile},
		"env":     map[string]string{"QL_TEST_SECRET": jobSecret},
	}
	if timeout != "" {
		s["timeout"] = timeout
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), childFile, grandchildFile
}

func startWorker(t *testing.T, url string) (*exec.Cmd, func() string) {
	cmd := exec.Command(testbin.Command(t, "qlworker"), "--dispatcher", url, "--token-file", tokenFile(t, token, 0o600), "--name", "w1")
	var mu sync.Mutex
	var stderr strings.Builder
	cmd.Stderr = writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return stderr.Write(p) })
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, func() string { mu.Lock(); defer mu.Unlock(); return stderr.String() }
}

func pidIn(t *testing.T, file string) int {
	t.Helper()
	var pid int
	eventually.NoError(t, 20*time.Second, "a pid in "+filepath.Base(file), func() error {
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err
	})
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // a failed test leaves nothing running
	return pid
}

// alive reports whether pid is a live process (a zombie counts as dead).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// qlworker killed by SIGKILL leaves nothing of its job running: the lease will expire and the
// Run be retried elsewhere, and a job still running here would be a second execution.
func TestSIGKILLedWorkerLeavesNoJobRunning(t *testing.T) {
	spec, childFile, grandchildFile := treeSpec(t, "")
	url, _ := fakeDispatcher(t, spec)
	cmd, logs := startWorker(t, url)
	child, grandchild := pidIn(t, childFile), pidIn(t, grandchildFile)
	if !alive(child) || !alive(grandchild) {
		t.Fatalf("the job (%d alive %v, %d alive %v) is not running before the kill", child, alive(child), grandchild, alive(grandchild))
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	eventually.True(t, 10*time.Second, "the job and its child to die with qlworker", func() bool { return !alive(child) && !alive(grandchild) })
	if p := leakedPiece(logs()); p != "" {
		t.Fatalf("qlworker's log holds %q of the spec's secret:\n%s", p, logs())
	}
}

// A timeout stops the whole tree (the grandchild ignores SIGTERM: only the SIGKILL after the
// kill grace ends it) and the report says timeout.
func TestTimeoutKillsTheJobsTree(t *testing.T) {
	spec, childFile, grandchildFile := treeSpec(t, "1s")
	url, completes := fakeDispatcher(t, spec)
	_, logs := startWorker(t, url)
	child, grandchild := pidIn(t, childFile), pidIn(t, grandchildFile)
	eventually.True(t, 20*time.Second, "the job's report", func() bool { return len(completes()) == 1 })
	c := completes()[0]
	if c.Outcome != workerproto.OutcomeFailed || c.Error == nil || c.Error.Kind != workerproto.KindTimeout {
		t.Fatalf("completion = %+v, want failed/timeout", c)
	}
	eventually.True(t, 10*time.Second, "the job and its child to be dead", func() bool { return !alive(child) && !alive(grandchild) })
	if p := leakedPiece(logs() + c.Error.Message); p != "" {
		t.Fatalf("qlworker's log or report holds %q of the spec's secret", p)
	}
}

func leakedPiece(text string) string {
	for i := 0; i+4 <= len(jobSecret); i++ {
		if strings.Contains(text, jobSecret[i:i+4]) {
			return jobSecret[i : i+4]
		}
	}
	return ""
}
