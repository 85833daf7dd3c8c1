package metrics

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
)

// A scrape never waits on the database: the gauges are read by Start's loop, once per interval,
// and a scrape serves the last reading, whatever its rate and however slow the read is. A failed
// read keeps the last values, counts, and lets their age grow; the first of a streak is logged
// with its error, and the read that ends it; Stop ends the loop.
func TestScrapeServesTheLastBackgroundReading(t *testing.T) {
	var calls atomic.Int64
	var fail atomic.Bool
	release := make(chan struct{}) // the second read blocks until the test releases it
	fn := func(ctx context.Context) (Backlog, error) {
		n := calls.Add(1)
		if n == 2 {
			<-release // a read that takes long, whatever its deadline
		}
		if fail.Load() {
			return Backlog{}, errors.New("database down")
		}
		return Backlog{Due: 10 * n, OldestAge: time.Duration(n) * time.Second, Uninitialised: n}, nil
	}
	co := coordinator.New(coordinator.DefaultConfig("cache-test"), nil)
	m := New(co, NewMeasurements("cache-test"), func() bool { return true }, fn, 20*time.Millisecond)
	scrape := func() string {
		t.Helper()
		rec := httptest.NewRecorder()
		done := make(chan struct{})
		start := time.Now()
		go func() { m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil)); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("a scrape waited on the database read")
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("a scrape took %s", d)
		}
		return rec.Body.String()
	}
	if body := scrape(); calls.Load() != 0 || !strings.Contains(body, "qlsched_backlog_schedules{owner=\"cache-test\"} 0") {
		t.Fatalf("before Start: %d reads; the scrape must not read the database", calls.Load())
	}
	var logs lockedBuffer
	if err := m.Start(context.Background(), slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background(), nil); err == nil {
		t.Error("a second Start succeeded")
	}
	// the first read lands; the second blocks, and scrapes keep serving the first
	eventually.True(t, 5*time.Second, "the second read to start", func() bool { return calls.Load() >= 2 })
	for range 5 {
		if body := scrape(); !strings.Contains(body, "qlsched_backlog_schedules{owner=\"cache-test\"} 10\n") ||
			!strings.Contains(body, "qlsched_schedules_uninitialised{owner=\"cache-test\"} 1\n") {
			t.Fatalf("while a read is blocked, the scrape serves:\n%s", grep(body, "qlsched_backlog_schedules", "qlsched_schedules_uninitialised"))
		}
	}
	fail.Store(true)
	close(release)
	eventually.True(t, 5*time.Second, "failed reads to be counted", func() bool {
		return strings.Contains(scrape(), "qlsched_backlog_reading_errors_total{owner=\"cache-test\"} 2")
	})
	if m.backlog.get().Due != 10 || m.backlog.age() < 20*time.Millisecond {
		t.Errorf("after failed reads: %+v, reading age %s; want the last values (10) growing older", m.backlog.get(), m.backlog.age())
	}
	fail.Store(false)
	eventually.True(t, 5*time.Second, "a read to succeed again", func() bool { return strings.Contains(logs.String(), "read again") })
	if got := strings.Count(logs.String(), "read failed"); got != 1 || !strings.Contains(logs.String(), "database down") {
		t.Errorf("a streak of failed reads logged %d lines; want one, with its error:\n%s", got, logs.String())
	}
	// a second streak is logged again, and its end too: one line each per streak
	fail.Store(true)
	eventually.True(t, 5*time.Second, "a second streak to be logged", func() bool { return strings.Count(logs.String(), "read failed") == 2 })
	fail.Store(false)
	eventually.True(t, 5*time.Second, "the second streak to end", func() bool { return strings.Count(logs.String(), "read again") == 2 })
	if err := m.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := calls.Load()
	if err := m.Stop(context.Background()); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	scrape()
	if calls.Load() != after {
		t.Errorf("the loop read the database after Stop")
	}
}

func grep(body string, names ...string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		for _, n := range names {
			if strings.HasPrefix(l, n) {
				out = append(out, l)
			}
		}
	}
	return strings.Join(out, "\n")
}

// lockedBuffer is a log destination the loop writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
