package worker_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/worker"
)

// Found by a hostile review (issue 32): a worker stopped (SIGTERM) while no dispatcher answers
// its registration panicked with a nil pointer dereference in Runner.serve (ensureSession returns
// a nil session and a nil error when ctx ends; serve then read sess.pollMaxWait). Live:
//
//	qlworker --dispatcher http://127.0.0.1:1 --token-file t --name x --capacity 1 & sleep 1.5; kill -TERM $!
//
// exited 2 with "panic: runtime error: invalid memory address or nil pointer dereference".
func TestStopWhileRegistrationRetries(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: every register is refused and retried
	c, err := worker.NewClient(worker.ClientOptions{Dispatchers: []string{"http://" + addr}, Token: "qlw_" + "A0123456789abcdefghijklmnopqrstuvwxyzABCDEF"[:43],
		RetryMin: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r, err := worker.NewRunner(worker.Config{Client: c, Name: "w", Capacity: 1,
		Handler: func(context.Context, worker.Job) worker.Result { return worker.Result{} }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		_ = r.Run(ctx)
	}()
	select {
	case p := <-done:
		if p != nil {
			t.Fatalf("Run panicked when stopped during registration: %v", p)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
