package coordinator

import (
	"sync"
	"testing"
)

// A snapshot taken while the counters move keeps their causal order: a claim is counted before
// its outcome and a round before its claims, so no snapshot shows more outcomes than claims.
func TestSnapshotKeepsCausalOrderWhileCountersMove(t *testing.T) {
	var s Stats
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			s.Rounds.Add(1)
			s.Claims.Add(2)
			s.Admits.Add(1)
			s.Releases.Add(1)
		}
	}()
	for range 200_000 {
		snap := s.Snapshot()
		if snap.Claims < snap.Admits+snap.Releases || 2*snap.Rounds < snap.Claims {
			close(done)
			wg.Wait()
			t.Fatalf("torn snapshot: %+v", snap)
		}
	}
	close(done)
	wg.Wait()
}
