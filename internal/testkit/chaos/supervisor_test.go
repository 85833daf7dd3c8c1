package chaos

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/internal/testkit/eventually"
)

// sleeper is a process that says it is ready and then sleeps, as itself (exec), so that a signal
// reaches the process whose stderr the supervisor reads.
func sleeper() Process {
	return Process{
		Command: func(string) *exec.Cmd { return exec.Command("sh", "-c", "echo ready >&2; exec sleep 60") },
		Ready:   func(line []byte) bool { return string(line) == "ready" },
	}
}

func TestSupervisorAppliesThePlanAndStops(t *testing.T) {
	t.Parallel()
	proc := sleeper()
	var asked []string // the owners Holding was asked about, each fault's twice (at once and 300 ms later)
	proc.Holding = func(owner string) []string {
		asked = append(asked, owner)
		return []string{"held-by-" + owner}
	}
	s := &Supervisor{Process: proc, Slots: 3, Prefix: "x", LogDir: t.TempDir()}
	t.Cleanup(s.KillAll)
	s.StartAll()
	eventually.True(t, 30*time.Second, "every process ready", func() bool { return s.LiveCount() == 3 })

	plan := []Fault{
		{At: 100 * time.Millisecond, Kind: Kill, Hold: 100 * time.Millisecond, Pick: 0},       // x1-i1, back as x1-i2
		{At: time.Second, Kind: Stop, Hold: 200 * time.Millisecond, Pick: 0, AimLeader: true}, // the "leader", x2-i1
		{At: 2 * time.Second, Kind: Restart, Pick: 2},                                         // x3-i1, back as x3-i2
		{At: 3 * time.Second, Kind: Kill, Hold: time.Second, Pick: 0},                         // x1-i2, back after 1 s
		{At: 3100 * time.Millisecond, Kind: Stop, Hold: time.Second},                          // skipped: x1 is down
	}
	s.Run(context.Background(), time.Now(), plan, func() string { return "x2-i1" })
	eventually.True(t, 30*time.Second, "every process ready after the plan", func() bool { return s.LiveCount() == 3 })

	if want := map[Kind]int{Kill: 2, Stop: 1, Restart: 1}; !maps.Equal(s.Injected, want) || s.Skipped != 1 || s.Aimed != 1 {
		t.Errorf("injected %v, skipped %d, aimed %d; want %v, 1, 1", s.Injected, s.Skipped, s.Aimed, want)
	}
	var applied []string
	for _, a := range s.Applied() {
		applied = append(applied, fmt.Sprintf("%s %v %v %v", a.Kind, a.Owners, a.Keys, a.UntilMs >= a.AtMs))
	}
	if want := []string{"kill [x1-i1] [held-by-x1-i1] true", "stop [x2-i1] [held-by-x2-i1] true",
		"restart [x3-i1] [held-by-x3-i1] true", "kill [x1-i2] [held-by-x1-i2] true"}; !slices.Equal(applied, want) {
		t.Errorf("applied faults %q; want %q", applied, want)
	}
	if want := []string{"x1-i1", "x1-i1", "x2-i1", "x2-i1", "x3-i1", "x3-i1", "x1-i2", "x1-i2"}; !slices.Equal(asked, want) {
		t.Errorf("Holding asked about %v; want %v", asked, want)
	}
	events := s.Events()
	for _, e := range []Event{{Owner: "x1-i1", What: "kill"}, {Owner: "x2-i1", What: "stop"}, {Owner: "x2-i1", What: "cont"},
		{Owner: "x3-i1", What: "term"}, {Owner: "x1-i2", What: "kill"}, {Owner: "x1-i3", What: "ready"}, {Owner: "x3-i2", What: "ready"}} {
		if !slices.ContainsFunc(events, func(got Event) bool { return got.Owner == e.Owner && got.What == e.What }) {
			t.Errorf("no %s of %s among the events %v", e.What, e.Owner, events)
		}
	}
	if s.Started() != 6 {
		t.Errorf("%d processes started; want 6 (3, then 2 after kills and 1 after the restart)", s.Started())
	}

	s.StopAll(10 * time.Second)
	s.StopAll(10 * time.Second) // a second stop finds nothing to do
	if n := s.LiveCount(); n != 0 {
		t.Errorf("%d processes live after StopAll; want 0", n)
	}
	exits := 0
	for _, e := range s.Events() {
		if e.What == "exit" {
			exits++
		}
	}
	if exits != 6 {
		t.Errorf("%d exits recorded; want 6", exits)
	}
	if err := s.Err(); err != nil {
		t.Errorf("supervisor problems: %v", err)
	}
}

// A planned fault skipped before its kind was ever applied hands its kind to the next planned
// fault: the CI soak once drew two restarts, both skipped while a killed replica was down, and
// failed as "proved little" with no restart applied.
func TestASkippedKindTakesTheNextSlot(t *testing.T) {
	t.Parallel()
	s := &Supervisor{Process: sleeper(), Slots: 3, Prefix: "y", LogDir: t.TempDir()}
	t.Cleanup(s.KillAll)
	s.StartAll()
	eventually.True(t, 30*time.Second, "every process ready", func() bool { return s.LiveCount() == 3 })
	plan := []Fault{
		{At: 100 * time.Millisecond, Kind: Kill, Hold: 2 * time.Second, Pick: 0}, // y1 down for 2 s
		{At: 500 * time.Millisecond, Kind: Restart, Pick: 1},                     // skipped: y1 is down
		{At: 4 * time.Second, Kind: Stop, Hold: 200 * time.Millisecond, Pick: 1}, // becomes the restart
	}
	s.Run(context.Background(), time.Now(), plan, func() string { return "" })
	eventually.True(t, 30*time.Second, "every process ready after the plan", func() bool { return s.LiveCount() == 3 })
	if want := map[Kind]int{Kill: 1, Restart: 1}; !maps.Equal(s.Injected, want) || s.Skipped != 1 {
		t.Errorf("injected %v, skipped %d; want %v and 1", s.Injected, s.Skipped, want)
	}
}
