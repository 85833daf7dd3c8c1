// Package eventually waits in tests for a condition that another process or goroutine makes true,
// polling until a deadline. It replaces sleep-then-check: a test waits exactly as long as it must,
// and a condition that never holds fails with what was awaited and the last error seen.
package eventually

import (
	"testing"
	"time"
)

// Poll is how often a condition is re-checked: short against the timeouts tests use, long enough
// not to load a shared machine.
const Poll = 20 * time.Millisecond

// True waits until cond returns true, failing the test after timeout with what it waited for.
func True(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	NoError(t, timeout, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

// NoError waits until f returns nil, failing the test after timeout with what it waited for and
// f's last error.
func NoError(t testing.TB, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if err == errNotYet {
				t.Fatalf("timed out after %s waiting for %s", timeout, what)
			}
			t.Fatalf("timed out after %s waiting for %s: last error: %v", timeout, what, err)
		}
		time.Sleep(Poll) // polling a condition owned by someone else, not synchronising goroutines
	}
}

type notYet struct{}

func (notYet) Error() string { return "condition not met yet" }

var errNotYet error = notYet{}
