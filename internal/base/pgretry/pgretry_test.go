package pgretry

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestDo(t *testing.T) {
	t.Parallel()
	deadlock := fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: pgerrcode.DeadlockDetected})
	serialization := &pgconn.PgError{Code: pgerrcode.SerializationFailure}
	other := &pgconn.PgError{Code: pgerrcode.UniqueViolation}
	plain := errors.New("connection lost")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name      string
		ctx       context.Context
		errs      []error // fn's result per call; past the end: nil
		wantCalls int
		wantErr   error
	}{
		{"success at once", context.Background(), nil, 1, nil},
		{"deadlock then success", context.Background(), []error{deadlock, serialization}, 3, nil},
		{"bounded", context.Background(), []error{deadlock, deadlock, deadlock, deadlock, deadlock}, 3, deadlock},
		{"other SQLSTATE not retried", context.Background(), []error{other}, 1, other},
		{"plain error not retried", context.Background(), []error{plain}, 1, plain},
		{"cancelled context stops", cancelled, []error{deadlock, deadlock}, 1, deadlock},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			calls := 0
			err := Do(tc.ctx, 2, func(int) time.Duration { return time.Millisecond }, func() error {
				calls++
				if calls <= len(tc.errs) {
					return tc.errs[calls-1]
				}
				return nil
			})
			if calls != tc.wantCalls || !errors.Is(err, tc.wantErr) {
				t.Errorf("%d calls, error %v; want %d, %v", calls, err, tc.wantCalls, tc.wantErr)
			}
		})
	}
}
