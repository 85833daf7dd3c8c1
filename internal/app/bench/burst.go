package bench

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/qlcontrol/controlcore/internal/base/dbconn"

	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/db"
)

// DefaultBurstCeilingBatch is the batch size of the burst scenario's batch ceiling in single mode
// (in batch mode it is --admit-batch): the rate the database writes the burst's rows at when
// nothing but the write set is asked of it, the denominator of the burst target.
const DefaultBurstCeilingBatch = 128

// burstLead is the least time between the replicas' start and the first burst: they start idle
// and wake at the instant (NextDueIn), never mid-way through setting up.
const burstLead = 5 * time.Second

// settleLead is the least time before a burst's instant for the tables to be settled (vacuumed
// and analysed, see settle) after the burst before it: a few seconds at 50,000 triggers a burst.
const settleLead = 15 * time.Second

// BurstFigures is one minute's burst: every trigger due at the same instant.
type BurstFigures struct {
	ScheduledAt  time.Time `json:"scheduled_at"`
	Admitted     int64     `json:"admitted"`      // Runs scheduled at the instant
	Missing      int64     `json:"missing"`       // triggers with no Run at the instant (not drained in time)
	DrainSeconds float64   `json:"drain_seconds"` // the last admission's database time minus the instant
	PerSecond    float64   `json:"per_second"`    // admitted ÷ drain time
	Ratio        float64   `json:"ratio"`         // per_second ÷ the batch ceiling of the same run
	LagP50Ms     float64   `json:"lag_p50_ms"`
	LagP99Ms     float64   `json:"lag_p99_ms"`
	LagMaxMs     float64   `json:"lag_max_ms"` // = drain time: every Run of the burst is scheduled at its instant
}

// runBurst is the burst scenario after publishing: the batch ceiling on the same write set, then
// every trigger due at the next minute boundary at least burstLead away, the replicas started
// before it, cfg.Bursts minute boundaries later the burst figures from the runs table, and the
// batch ceiling once more. The bursts write into tables that grow by a burst each, and the
// server checkpoints and vacuums as they go; the ceiling is the mean of a phase before them, on
// the tables they start from, and one after, on the tables they leave, as single mode's is.
// Each phase, ceiling or burst, starts on settled tables (settle).
func runBurst(ctx context.Context, cfg Config, rep *Report, adminPool *dbconn.DB, pools []*dbconn.DB, project string,
	measure func(name string, phase int64, batch int) (float64, error), say func(string, ...any)) error {
	var err error
	ceilingBatch := cfg.Batch
	if ceilingBatch <= 1 {
		ceilingBatch = DefaultBurstCeilingBatch
	}
	rep.CeilingBatch = ceilingBatch
	if rep.BatchCeilingBeforePerSecond, err = measure("batch ceiling", 2, ceilingBatch); err != nil {
		return err
	}

	// every trigger due at the same minute boundary: the ceiling left them at the next one, but it
	// may be too close (or passed); the burst's instant is chosen now, by database time
	now := dbNow(ctx, adminPool)
	minute := time.Minute.Milliseconds()
	first := (now+burstLead.Milliseconds())/minute*minute + minute
	q := db.New(adminPool.Pool())
	if _, err := q.BenchSetDue(ctx, db.BenchSetDueParams{ProjectID: project, DueMs: first}); err != nil {
		return err
	}
	if err := settle(ctx, adminPool); err != nil {
		say("the first burst starts unsettled: %v", err)
	}
	last := first + int64(cfg.Bursts-1)*minute

	say("scheduler: %d in-process replicas, budget %d, cadence %s, admit batch %d: %d bursts of %d from %s, then up to %s to drain the last",
		cfg.Replicas, cfg.Budget, cfg.Cadence, max(cfg.Batch, 1), cfg.Bursts, cfg.Triggers, time.UnixMilli(first).UTC().Format(time.TimeOnly), cfg.Duration)
	run := cfg
	run.Duration = time.Duration(last-dbNow(ctx, adminPool))*time.Millisecond + cfg.Duration
	var ru0, ru1 syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	var polled time.Time
	var drained bool
	admitsAtLast := int64(-1)
	settled := 1 // bursts that start settled: the first; the others once the one before drains
	res, err := runReplicas(ctx, pools, run, func(s coordinator.Snapshot) bool {
		// Between bursts the replicas idle; the tables are settled there, while the replicas
		// run on, unless the next instant is too close for a vacuum to end before it.
		if settled < cfg.Bursts && s.Admits >= int64(settled*cfg.Triggers) {
			// the next instant by the server's clock, less a margin: the vacuum must end before it
			next := time.Now().Add(time.Duration(first+int64(settled)*minute-dbNow(ctx, adminPool))*time.Millisecond - time.Second)
			if time.Until(next) < settleLead {
				say("burst %d starts unsettled: the burst before drained less than %s before its instant", settled+1, settleLead)
			} else {
				sctx, cancel := context.WithDeadline(ctx, next)
				if err := settle(sctx, adminPool); err != nil {
					say("burst %d starts unsettled: %v", settled+1, err)
				}
				cancel()
			}
			settled++
		}
		// The count of the last burst's Runs reads the project's whole runs table (12 ms at
		// 100,000 Runs), so it is asked only once the replicas have admitted a burst's worth
		// since a second before the last instant (none of that burst is admitted before it),
		// and then 4 times a second at most: the bursts are measured without the bench's own
		// reads in their way.
		if admitsAtLast < 0 {
			if time.Now().UnixMilli() < last-time.Second.Milliseconds() {
				return false
			}
			admitsAtLast = s.Admits
		}
		if s.Admits-admitsAtLast < int64(cfg.Triggers) || time.Since(polled) < 250*time.Millisecond {
			return false
		}
		polled = time.Now()
		n, err := q.BenchRunsAt(ctx, db.BenchRunsAtParams{ProjectID: project, ScheduledForMs: last})
		drained = err == nil && n >= int64(cfg.Triggers)
		return drained
	})
	if err != nil {
		return err
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
	rep.CPUPercent = 100 * cpu.Seconds() / res.seconds
	if !drained {
		say("the last burst did not drain within %s of its instant", cfg.Duration)
	}
	rep.Seconds = res.seconds
	rep.Admits, rep.Retries, rep.Races, rep.Releases, rep.Skips, rep.Errors = res.stats.Admits, res.stats.Retries,
		res.stats.Races, res.stats.Releases, res.stats.Skips, res.stats.Errors
	rep.SaturatedRounds, rep.Rounds = res.stats.Saturated, res.stats.Rounds
	if rep.Admits > 0 {
		rep.RetryRate = float64(rep.Retries) / float64(rep.Admits)
	}
	rep.ClaimP50Ms, rep.ClaimP99Ms = res.claims.percentiles()
	rep.AdmitP50Ms, rep.AdmitP99Ms = res.admits.percentiles()

	rows, err := q.BenchBursts(ctx, db.BenchBurstsParams{ProjectID: project, FromMs: first, CeilingFromMs: ceilingEpochMs})
	if err != nil {
		return err
	}
	if rep.Duplicates, err = q.BenchDuplicates(ctx, db.BenchDuplicatesParams{ProjectID: project, CeilingFromMs: ceilingEpochMs}); err != nil {
		return err
	}
	if rep.BatchCeilingAfterPerSecond, err = measure("batch ceiling again", 3, ceilingBatch); err != nil {
		return err
	}
	rep.BatchCeilingPerSecond = (rep.BatchCeilingBeforePerSecond + rep.BatchCeilingAfterPerSecond) / 2
	byInstant := map[int64]db.BenchBurstsRow{}
	for _, r := range rows {
		byInstant[r.ScheduledForMs] = r
	}
	var admitted int64
	var drainSeconds float64
	for at := first; at <= last; at += minute {
		r := byInstant[at]
		b := BurstFigures{ScheduledAt: time.UnixMilli(at).UTC(), Admitted: r.Runs, Missing: int64(cfg.Triggers) - r.Runs,
			DrainSeconds: float64(r.MaxMs) / 1000, LagP50Ms: r.P50Ms, LagP99Ms: r.P99Ms, LagMaxMs: float64(r.MaxMs)}
		if b.DrainSeconds > 0 {
			b.PerSecond = float64(b.Admitted) / b.DrainSeconds
		}
		if rep.BatchCeilingPerSecond > 0 {
			b.Ratio = b.PerSecond / rep.BatchCeilingPerSecond
		}
		admitted += b.Admitted
		drainSeconds += b.DrainSeconds
		rep.Bursts = append(rep.Bursts, b)
		rep.LagP50Ms, rep.LagP99Ms = max(rep.LagP50Ms, b.LagP50Ms), max(rep.LagP99Ms, b.LagP99Ms)
	}
	// the scenario's rate is the bursts' own: admissions over the time they took to drain, not
	// over the idle wait between them
	if drainSeconds > 0 {
		rep.AdmitsPerSecond = float64(admitted) / drainSeconds
	}
	if rep.BatchCeilingPerSecond > 0 {
		rep.BatchRatio = rep.AdmitsPerSecond / rep.BatchCeilingPerSecond
	}
	m := rss()
	rep.RSSMiB, rep.PeakRSSMiB, rep.AnonRSSMiB = m.RSS, m.Peak, m.Anon
	return nil
}

// burstText renders the per-burst lines.
// measuredPhase names what the ceilings measured before and after bracket.
func (r Report) measuredPhase() string {
	if r.Scenario == Burst {
		return "bursts"
	}
	return "replicas"
}

func (r Report) burstText(b *strings.Builder) {
	for _, x := range r.Bursts {
		drained := fmt.Sprintf("drained in %.2fs", x.DrainSeconds)
		if x.Missing > 0 { // never admitted at this instant: folded into a later one by fire_once, or the run ended
			drained = fmt.Sprintf("NOT drained, %d missing; admitted within %.2fs", x.Missing, x.DrainSeconds)
		}
		fmt.Fprintf(b, "  burst %s  %d admitted, %s = %.0f/s, %.2f × the batch ceiling; lag p50 %.0fms p99 %.0fms max %.0fms\n",
			x.ScheduledAt.Format(time.TimeOnly), x.Admitted, drained, x.PerSecond, x.Ratio, x.LagP50Ms, x.LagP99Ms, x.LagMaxMs)
	}
}
