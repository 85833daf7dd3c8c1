package coordinator

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// Saturation is logged once when a run of full rounds starts and once when it ends, never per
// round; a load just below capacity, whose rounds alternate between full and not, logs nothing;
// the start line states the capacity budget ÷ cadence, the end line the full rounds of the run.
func TestSaturationLogsOnceWhenItStartsAndOnceWhenItEnds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		claimed     []int
		starts, end int
		want        []string
	}{
		{"flapping below capacity", []int{16, 5, 16, 5, 16, 16, 5, 16, 5, 16, 5}, 0, 0, nil},
		{"two runs, a short dip inside the first", []int{3, 16, 16, 16, 5, 2, 16, 0, 0, 0, 16, 16, 16, 16, 1, 1, 1}, 2, 2,
			[]string{"capacity_per_second=16", "saturated_rounds=4"}},
		{"still saturated", []int{16, 16, 16, 16, 16, 3}, 1, 0, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, nil))
			cfg := DefaultConfig("sat")
			var s saturation
			for _, claimed := range c.claimed {
				s.observe(log, cfg, time.Now(), claimed)
			}
			out := buf.String()
			if n := strings.Count(out, "msg=\"saturated:"); n != c.starts {
				t.Errorf("saturation start logged %d times, want %d:\n%s", n, c.starts, out)
			}
			if n := strings.Count(out, "msg=\"saturation ended\""); n != c.end {
				t.Errorf("saturation end logged %d times, want %d:\n%s", n, c.end, out)
			}
			for _, want := range c.want {
				if !strings.Contains(out, want) {
					t.Errorf("log lacks %s:\n%s", want, out)
				}
			}
		})
	}
}
