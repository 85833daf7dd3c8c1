// Package pgretry runs a transaction again when PostgreSQL aborted it to break a deadlock
// (40P01) or a serialization conflict (40001): both roll the whole transaction back, so running
// it again from the start is safe, and the other side of the conflict has usually gone by then.
// The publisher (admin) and the coordinator's initialisation share it.
package pgretry

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// Retryable reports whether err is (or wraps) a deadlock (40P01) or a serialization failure
// (40001).
func Retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.DeadlockDetected || pgErr.Code == pgerrcode.SerializationFailure)
}

// Do runs fn, and runs it again, at most retries more times, while it fails with a Retryable
// error, pausing pause(attempt) before each retry (attempt 0 is the first retry's). It returns
// fn's last error (nil once it succeeds), or that error as it stands when ctx ends during a
// pause. fn must start from nothing on each call: it must not carry anything from one call to
// the next.
func Do(ctx context.Context, retries int, pause func(attempt int) time.Duration, fn func() error) error {
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil || attempt >= retries || !Retryable(err) || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(pause(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}
