package chaos

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Kind is a fault.
type Kind string

// The faults a plan draws.
const (
	Kill    Kind = "kill"    // SIGKILL, a new process after Hold
	Stop    Kind = "stop"    // SIGSTOP, SIGCONT after Hold
	Restart Kind = "restart" // SIGTERM, a new process once the old one exited
	StopAll Kind = "stopall" // SIGSTOP of every live process, SIGCONT after Hold
)

// Fault is one planned fault. Which process it hits is decided when it is due: AimLeader picks
// the process the system under test calls its leader (or one holding work), else Pick chooses
// among the live processes.
type Fault struct {
	At        time.Duration // offset from the start of the fault phase
	Kind      Kind
	Hold      time.Duration // restart delay (Kill) or stop length (Stop, StopAll)
	AimLeader bool
	Pick      uint64
}

// PlanConfig shapes a plan. Zero fields take the defaults of DefaultPlanConfig.
type PlanConfig struct {
	Seed       uint64
	Duration   time.Duration // the fault phase
	FaultEvery time.Duration // mean time between faults (exponential)
	MaxStop    time.Duration // longest SIGSTOP of one process
}

// DefaultPlanConfig is the faults soak's mix: a fault every 2 s on average, stops up to 6 s
// (twice qlsched's 3 s lease in the soak).
func DefaultPlanConfig(seed uint64, d time.Duration) PlanConfig {
	return PlanConfig{Seed: seed, Duration: d, FaultEvery: 2 * time.Second, MaxStop: 6 * time.Second}
}

// Validate checks the bounds before anything starts.
func (c PlanConfig) Validate() error {
	switch {
	case c.Duration < 5*time.Second || c.Duration > time.Hour:
		return fmt.Errorf("fault duration %s: want 5s … 1h", c.Duration)
	case c.FaultEvery < 500*time.Millisecond:
		return fmt.Errorf("mean time between faults %s: want ≥ 500ms", c.FaultEvery)
	case c.MaxStop < 300*time.Millisecond:
		return fmt.Errorf("longest stop %s: want ≥ 300ms", c.MaxStop)
	}
	return nil
}

// NewPlan draws the faults of c.Duration from c.Seed. The same config gives the same plan. Faults
// land 0–120 ms after a whole second of the phase, when every-second work has just fallen due,
// and half of them aim at the leader. The mix is the faults soak's: 38 % kills, 34 % stops, 28 %
// graceful restarts, and 4 % of draws a stop of every process (1–3 s); from the fourth fault on,
// a kind not drawn yet comes first, so that a short plan has every kind.
func NewPlan(c PlanConfig) []Fault {
	rng := rand.New(rand.NewPCG(c.Seed, 0x5eed))
	uniform := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)) }
	seen := map[Kind]int{}
	var plan []Fault
	at := time.Duration(0)
	for {
		at += time.Duration(rng.ExpFloat64() * float64(c.FaultEvery))
		at = at.Truncate(time.Second) + time.Second + uniform(0, 120*time.Millisecond)
		if at >= c.Duration {
			return plan
		}
		f := Fault{At: at, AimLeader: rng.IntN(2) == 0, Pick: rng.Uint64()}
		roll := rng.Float64()
		if len(plan) >= 3 {
			switch {
			case seen[Kill] == 0:
				roll = 0.1
			case seen[Stop] == 0:
				roll = 0.5
			case seen[Restart] == 0:
				roll = 0.9
			}
		}
		switch {
		case roll < 0.04:
			f.Kind, f.Hold, f.AimLeader = StopAll, uniform(time.Second, 3*time.Second), false
		case roll < 0.38:
			f.Kind, f.Hold = Kill, uniform(500*time.Millisecond, 4*time.Second)
		case roll < 0.72:
			f.Kind, f.Hold = Stop, uniform(300*time.Millisecond, c.MaxStop)
		default:
			f.Kind = Restart
		}
		seen[f.Kind]++
		plan = append(plan, f)
	}
}
