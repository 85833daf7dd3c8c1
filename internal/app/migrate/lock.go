package migrate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/qlcontrol/controlcore/db"
)

// LockHolder is a session that holds the migration lock, as pg_locks and pg_stat_activity show
// it. Fields the connected role may not see of another role's session are empty.
type LockHolder struct {
	PID             int32     `json:"pid"`
	ApplicationName string    `json:"application_name"`
	User            string    `json:"user"`
	ClientAddr      string    `json:"client_addr"`
	Since           time.Time `json:"since,omitempty"` // its transaction's start, else its connection's
	State           string    `json:"state"`
}

func (h LockHolder) String() string {
	show := func(s string) string {
		if s == "" {
			return "(not visible)"
		}
		return s
	}
	since := "(not visible)"
	if !h.Since.IsZero() {
		since = fmt.Sprintf("%s (%s ago)", h.Since.UTC().Format(time.RFC3339), time.Since(h.Since).Round(time.Second))
	}
	return fmt.Sprintf("pid %d, application_name %q, user %s, client %s, since %s, state %s",
		h.PID, h.ApplicationName, show(h.User), show(h.ClientAddr), since, show(h.State))
}

// LockTimeoutError means the migration lock was not granted within the lock timeout; nothing
// was applied by the transaction that waited.
type LockTimeoutError struct {
	Waited  time.Duration
	Holders []LockHolder
}

func (e *LockTimeoutError) Error() string {
	who := "a session that has let go since"
	if len(e.Holders) > 0 {
		parts := make([]string, len(e.Holders))
		for i, h := range e.Holders {
			parts[i] = h.String()
		}
		who = strings.Join(parts, "; ")
	}
	return fmt.Sprintf("gave up after %s waiting for the migration lock (lock timeout), held by %s; nothing more was applied", e.Waited.Round(time.Millisecond), who)
}

// Holders returns the sessions that hold the migration lock now, giving up after holdersTimeout
// (a connection of the pool may be what it waits for). It reads as the login role (SET LOCAL ROLE NONE), not the owner role up acts as: a superuser or
// a pg_read_all_stats member sees every column of every session.
func (r *Runner) Holders(ctx context.Context) ([]LockHolder, error) {
	ctx, cancel := context.WithTimeout(ctx, holdersTimeout)
	defer cancel()
	var rows []db.MigrationLockHoldersRow
	err := r.db.InTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL ROLE NONE"); err != nil {
			return err
		}
		var err error
		rows, err = db.New(tx).MigrationLockHolders(ctx, LockKey)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read who holds the migration lock: %w", err)
	}
	out := make([]LockHolder, 0, len(rows))
	for _, row := range rows {
		h := LockHolder{PID: row.Pid, ApplicationName: row.ApplicationName, User: row.Usename, ClientAddr: row.ClientAddr, State: row.State}
		if row.Since.Valid {
			h.Since = row.Since.Time
		}
		out = append(out, h)
	}
	return out, nil
}

// takeLock runs acquire (a statement that waits for the lock under lock_timeout) while a watcher
// on another connection names the holders to Options.Waiting: first after a second, then every
// WaitReportInterval. A lock_timeout expiry becomes a *LockTimeoutError naming them.
func (r *Runner) takeLock(ctx context.Context, acquire func() error) error {
	start := time.Now()
	watchCtx, stop := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		r.watch(watchCtx, start)
	}()
	err := acquire()
	stop()
	<-watched
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.LockNotAvailable { // lock_timeout expired
		holders, herr := r.Holders(ctx)
		if herr != nil {
			return errors.Join(&LockTimeoutError{Waited: time.Since(start)}, herr)
		}
		return &LockTimeoutError{Waited: time.Since(start), Holders: holders}
	}
	if err != nil {
		return fmt.Errorf("take the migration lock: %w", err)
	}
	return nil
}

func (r *Runner) watch(ctx context.Context, start time.Time) {
	if r.opts.Waiting == nil {
		return
	}
	next := time.Second
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(start.Add(next))):
		}
		holders, err := r.Holders(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil && len(holders) > 0 {
			r.opts.Waiting(time.Since(start), holders)
		}
		next += WaitReportInterval
	}
}
