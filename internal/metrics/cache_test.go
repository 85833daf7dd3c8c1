package metrics

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The backlog gauge queries the database at most once per --backlog-interval however often it is
// scraped, and keeps its last value when a refresh fails.
func TestBacklogQueriedAtMostOncePerInterval(t *testing.T) {
	calls, fail := 0, false
	b := &backlogCache{interval: time.Hour, fn: func(context.Context) (int64, time.Duration, error) {
		calls++
		if fail {
			return 0, 0, errors.New("database down")
		}
		return int64(10 * calls), time.Duration(calls) * time.Second, nil
	}}
	for range 5 {
		if due, age := b.get(); due != 10 || age != time.Second {
			t.Fatalf("backlog %d, age %s; want 10, 1s", due, age)
		}
	}
	if calls != 1 {
		t.Fatalf("%d queries for 5 scrapes within one interval; want 1", calls)
	}
	b.at = b.at.Add(-time.Hour) // the interval has passed
	if due, _ := b.get(); due != 20 || calls != 2 {
		t.Fatalf("after the interval: backlog %d after %d queries; want 20 after 2", due, calls)
	}
	b.at, fail = b.at.Add(-time.Hour), true
	if due, age := b.get(); due != 20 || age != 2*time.Second || calls != 3 {
		t.Fatalf("failed refresh: backlog %d, age %s after %d queries; want the last value 20, 2s after 3", due, age, calls)
	}
}
