package coordinator

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// Saturation is logged once when a run of full rounds starts and once when it ends, never per
// round, and the start line states the capacity budget ÷ cadence.
func TestSaturationLogsOnceWhenItStartsAndOnceWhenItEnds(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	cfg := DefaultConfig("sat")
	var s saturation
	for _, claimed := range []int{3, 16, 16, 16, 5, 2, 16, 0} {
		s.observe(log, cfg, time.Now(), claimed)
	}
	out := buf.String()
	if n := strings.Count(out, "msg=\"saturated:"); n != 2 {
		t.Errorf("saturation start logged %d times, want 2 (two runs of full rounds):\n%s", n, out)
	}
	if n := strings.Count(out, "msg=\"saturation ended\""); n != 2 {
		t.Errorf("saturation end logged %d times, want 2:\n%s", n, out)
	}
	for _, want := range []string{"capacity_per_second=16", "saturated_rounds=3", "saturated_rounds=1"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}
