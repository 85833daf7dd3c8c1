package main

import (
	"io"
	"net/http"
	"testing"
)

// The worker keeps an idle connection for every request that can be in flight at once (the poll,
// an ACK and a report per slot, a heartbeat): with net/http's default of 2, the concurrent ACKs
// of one answer would close their connections after use and dial (TLS: handshake) again.
func TestTransportKeepsAConnectionPerRequestInFlight(t *testing.T) {
	for _, capacity := range []string{"1", "4", "49", "64", "256"} {
		o, _, err := parse([]string{"--dispatcher", "http://127.0.0.1:1,http://127.0.0.1:2", "--name", "w1", "--capacity", capacity,
			"--token-file", tokenFile(t, token+"\n", 0o600)}, io.Discard, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		tr, ok := o.transport.(*http.Transport)
		if !ok {
			t.Fatalf("transport %T", o.transport)
		}
		if want := 2*o.capacity + 2; tr.MaxIdleConnsPerHost < want {
			t.Errorf("--capacity %s: MaxIdleConnsPerHost %d, want ≥ %d", capacity, tr.MaxIdleConnsPerHost, want)
		}
		// The limit on all hosts together (net/http's default transport: 100) must not cut the
		// per-host one: every dispatcher of --dispatcher keeps its connections.
		if want := 2 * (2*o.capacity + 2); tr.MaxIdleConns != 0 && tr.MaxIdleConns < want {
			t.Errorf("--capacity %s, 2 dispatchers: MaxIdleConns %d, want 0 (no limit) or ≥ %d", capacity, tr.MaxIdleConns, want)
		}
	}
}
