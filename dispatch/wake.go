package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// WakeChannel is the channel the scheduler notifies once an admit that wrote at least one Run
// committed (sql/queries/wake.sql, coordinator's AdmitBatch): the Waker LISTENs on it.
const WakeChannel = "qlsched_runs_queued"

// Waker LISTENs on WakeChannel on one dedicated connection and wakes the placer at each
// notification, so a newly admitted Run is placed at once instead of at the next
// PlacementInterval probe. The probe stays: a lost notification (the connection dropped, the
// Waker off) costs at most one interval. LISTEN needs a session of its own: behind a
// transaction-pooling PgBouncer it must connect to PostgreSQL directly (docs/dispatch.md).
//
// When connecting, LISTEN or the wait fails, the Waker logs once (a Warn), keeps the probe as the
// only way to find work, and tries again after a backoff (1s doubling to 30s); it logs again
// (an Info) when it listens again.
type Waker struct {
	connect func(context.Context) (*pgx.Conn, error)
	placer  *Placer
	log     *slog.Logger

	MinBackoff, MaxBackoff time.Duration // 1s and 30s unless set before Start

	listening     atomic.Bool
	notifications atomic.Int64

	mu   sync.Mutex
	stop context.CancelFunc
	done chan struct{}
}

// NewWaker makes a waker for placer; connect opens the dedicated connection (its errors must
// hold no secret: dbconn.Config.Connect's do not).
func NewWaker(connect func(context.Context) (*pgx.Conn, error), placer *Placer, log *slog.Logger) *Waker {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Waker{connect: connect, placer: placer, log: log, MinBackoff: time.Second, MaxBackoff: 30 * time.Second}
}

// Listening is whether the Waker listens now (false: the placer finds work by its probe only).
func (w *Waker) Listening() bool { return w.listening.Load() }

// Notifications is how many notifications the Waker received.
func (w *Waker) Notifications() int64 { return w.notifications.Load() }

// Start runs the Waker in a goroutine until ctx ends or Stop is called.
func (w *Waker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done != nil {
		return errors.New("dispatch waker: already started")
	}
	ctx, w.stop = context.WithCancel(ctx)
	w.done = make(chan struct{})
	go w.run(ctx)
	return nil
}

// Stop ends the Waker and closes its connection. Idempotent.
func (w *Waker) Stop() {
	w.mu.Lock()
	stop, done := w.stop, w.done
	w.mu.Unlock()
	if stop == nil {
		return
	}
	stop()
	<-done
}

func (w *Waker) run(ctx context.Context) {
	defer close(w.done)
	backoff, failing := w.MinBackoff, false
	for {
		err := w.listen(ctx, func() {
			if failing {
				w.log.Info("dispatch wake-up on admission listening again")
			}
			backoff, failing = w.MinBackoff, false
		})
		w.listening.Store(false)
		if ctx.Err() != nil {
			return
		}
		if !failing {
			w.log.Warn("dispatch wake-up on admission unavailable: Runs are found by the --placement-interval probe until LISTEN works again",
				"channel", WakeChannel, "retry_in", backoff.String(), "error", err)
			failing = true
		} else {
			w.log.Debug("dispatch wake-up on admission still unavailable", "retry_in", backoff.String(), "error", err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, w.MaxBackoff)
	}
}

// listen connects, LISTENs and wakes the placer at each notification until the connection
// fails or ctx ends; up is called once LISTEN succeeded.
func (w *Waker) listen(ctx context.Context, up func()) error {
	conn, err := w.connect(ctx)
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+WakeChannel); err != nil {
		return err
	}
	w.listening.Store(true)
	up()
	w.placer.Kick() // Runs admitted while nobody listened: probe once now
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			// The connection's response bound (dbconn: statement timeout + margin) ends a quiet
			// wait with a timeout, which leaves the connection open: one ping tells a quiet
			// channel from a dead connection.
			var ne net.Error
			if ctx.Err() == nil && errors.As(err, &ne) && ne.Timeout() {
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err = conn.Ping(pctx)
				cancel()
				if err == nil {
					continue
				}
			}
			return err
		}
		at := time.Now()
		w.notifications.Add(1)
		w.placer.Wake()
		if w.log.Enabled(ctx, slog.LevelDebug) { // the loop bench's segments (docs/dispatch.md)
			w.log.Debug("dispatch wake notification", "at_ms", at.UnixMilli())
		}
	}
}
