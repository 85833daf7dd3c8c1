package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// httpServer serves one listener in the background: run's /healthz, /readyz and /metrics and
// ui's console both go through it, so neither drops a Serve that fails nor waits on a shutdown
// without a bound.
type httpServer struct {
	srv  *http.Server
	done chan struct{} // closed when Serve has returned
	err  error         // why Serve returned, nil when Shutdown ended it; read after done
}

func serveHTTP(srv *http.Server, ln net.Listener) *httpServer {
	s := &httpServer{srv: srv, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.err = fmt.Errorf("http server on %s stopped: %w", ln.Addr(), err)
		}
	}()
	return s
}

// Failed is closed when Serve has returned by itself (its listener failed); Err says why.
func (s *httpServer) Failed() <-chan struct{} { return s.done }

// Err is why Serve returned; it waits until it has.
func (s *httpServer) Err() error {
	<-s.done
	return s.err
}

// Shutdown stops accepting, lets the requests in flight finish for at most bound, then closes
// the connections left, and returns once Serve has: a non-nil error says requests were cut.
func (s *httpServer) Shutdown(bound time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
		err = fmt.Errorf("requests still in flight after %s were cut: %w", bound, err)
	}
	<-s.done
	return err
}
