package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// A second SIGTERM or SIGINT during the withdraw grace ends the grace at once: the replica drains
// and exits 0 in seconds instead of waiting the rest of a minute's --withdraw-grace.
func TestASecondSignalCutsTheWithdrawGraceShort(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		first, second os.Signal
	}{
		{"sigterm_then_sigint", syscall.SIGTERM, syscall.SIGINT},
		{"sigint_then_sigterm", syscall.SIGINT, syscall.SIGTERM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := testpg.New(t)
			r := startReplica(t, qlsched(t), "--database-url", d.URL("ql_runtime"), "--http-addr", "127.0.0.1:0",
				"--withdraw-grace", "1m")
			r.waitFor(t, 60*time.Second, "replica running", func(l string) bool { return strings.Contains(l, "replica running") })
			if err := r.cmd.Process.Signal(tc.first); err != nil {
				t.Fatal(err)
			}
			r.waitFor(t, 10*time.Second, "admission withdrawn", func(l string) bool { return strings.Contains(l, "admission withdrawn") })
			if err := r.cmd.Process.Signal(tc.second); err != nil {
				t.Fatal(err)
			}
			code := r.exitWithin(t, 20*time.Second) // the grace is a minute
			out := r.all.String()
			if code != 0 {
				t.Errorf("exit %d, want 0:\n%s", code, out)
			}
			cut, drained, stopped := strings.Index(out, "withdraw grace cut short"), strings.Index(out, "draining"), strings.Index(out, "msg=stopped")
			if cut < 0 || drained < cut || stopped < drained {
				t.Errorf("log lacks 'withdraw grace cut short', then 'draining', then 'stopped':\n%s", out)
			}
		})
	}
}

// The HTTP server of run and ui reports a Serve that fails, and its shutdown keeps its bound
// even when a request never ends.
func TestHTTPServerReportsServeErrorsAndBoundsItsShutdown(t *testing.T) {
	t.Parallel()
	t.Run("a failed listener is reported", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_ = ln.Close() // Accept fails at once
		hs := serveHTTP(&http.Server{ReadHeaderTimeout: time.Second}, ln)
		select {
		case <-hs.Failed():
		case <-time.After(10 * time.Second):
			t.Fatal("Serve on a closed listener did not return")
		}
		if err := hs.Err(); err == nil || !strings.Contains(err.Error(), "http server on 127.0.0.1:") {
			t.Errorf("Serve's error %v; want it reported, naming the address", err)
		}
	})
	t.Run("shutdown cuts a request that outlives the bound", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		entered, release := make(chan struct{}), make(chan struct{})
		defer close(release)
		hs := serveHTTP(&http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			close(entered)
			<-release // never, while the test runs
		})}, ln)
		got := make(chan error, 1)
		go func() {
			resp, err := http.Get("http://" + ln.Addr().String() + "/")
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			got <- err
		}()
		<-entered
		began := time.Now()
		err = hs.Shutdown(200 * time.Millisecond)
		if took := time.Since(began); !errors.Is(err, context.DeadlineExceeded) || took > 5*time.Second {
			t.Errorf("shutdown returned %v after %s; want the bound's error after about 200ms", err, took)
		}
		select {
		case err := <-got:
			if err == nil {
				t.Error("the request in flight got a whole answer; want its connection cut")
			}
		case <-time.After(5 * time.Second):
			t.Error("the request is still in flight 5 s after the shutdown; want its connection cut")
		}
		if err := hs.Err(); err != nil {
			t.Errorf("Serve ended by Shutdown reported %v; want nil", err)
		}
	})
}
