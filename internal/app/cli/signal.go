package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

type secondSignalKey struct{}

// signalContext is cancelled by the first SIGINT or SIGTERM; a second one closes the channel
// SecondSignal finds in it: an operator who signals again wants the stop that is under way cut
// short (run's withdraw grace). stop stops the catching; the signals' default action returns.
func signalContext() (ctx context.Context, stop func()) {
	sigs := make(chan os.Signal, 2) // two signals sent at once both count
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	second, done := make(chan struct{}), make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-done:
			return
		}
		select {
		case <-sigs:
			close(second)
		case <-done:
		}
	}()
	return context.WithValue(ctx, secondSignalKey{}, (<-chan struct{})(second)), func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}

// SecondSignal is closed when a second SIGINT or SIGTERM arrives after the one that cancelled
// ctx, a context Run gave the command; for any other context it is nil (never ready).
func SecondSignal(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(secondSignalKey{}).(<-chan struct{})
	return ch
}
