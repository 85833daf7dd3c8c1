package eventually

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// recorder captures Fatalf so a test can check that a wait fails, and how.
type recorder struct {
	testing.TB
	msg string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msg = format
	for _, a := range args {
		r.msg += " " + toString(a)
	}
	panic(r) // stop the wait as t.Fatalf's Goexit would
}

func toString(a any) string {
	switch v := a.(type) {
	case error:
		return v.Error()
	case interface{ String() string }:
		return v.String()
	case string:
		return v
	}
	return ""
}

func fails(t *testing.T, wait func(tb testing.TB)) (msg string) {
	t.Helper()
	r := &recorder{TB: t}
	defer func() {
		if p := recover(); p != r {
			t.Fatalf("the wait did not fail (recovered %v)", p)
		}
		msg = r.msg
	}()
	wait(r)
	return ""
}

func TestTrueReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	True(t, time.Second, "three calls", func() bool { return n.Add(1) == 3 })
	if got := n.Load(); got != 3 {
		t.Fatalf("condition called %d times, want 3", got)
	}
}

func TestTrueFailsAtTheDeadlineNamingWhatItAwaited(t *testing.T) {
	msg := fails(t, func(tb testing.TB) { True(tb, 50*time.Millisecond, "the sky to fall", func() bool { return false }) })
	if !strings.Contains(msg, "the sky to fall") || strings.Contains(msg, "last error") {
		t.Fatalf("message %q: want the awaited condition and no error", msg)
	}
}

func TestNoErrorFailsWithTheLastError(t *testing.T) {
	calls := 0
	msg := fails(t, func(tb testing.TB) {
		NoError(tb, 50*time.Millisecond, "a connection", func() error {
			calls++
			if calls == 1 {
				return errors.New("first")
			}
			return errors.New("connection refused")
		})
	})
	if !strings.Contains(msg, "a connection") || !strings.Contains(msg, "connection refused") {
		t.Fatalf("message %q: want the awaited condition and the last error", msg)
	}
}
