package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/qlcontrol/controlcore/db"
)

// LoopSegment is one segment of admitted → running over the loop window's Runs: its p50, p99 and
// max in milliseconds (docs/dispatch.md, "Where admitted → running goes").
type LoopSegment struct {
	Name  string  `json:"name"`
	Runs  int     `json:"runs"`
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs int64   `json:"max_ms"`
}

// The segments, in order. Database times are statement times (statement_timestamp), the
// dispatchers' times their clock: one host, one clock.
const (
	segAdmitCommit   = "admitted → committed"  // the rest of the admit's statement, its durable commit, the answer back at the replica
	segCommitNotify  = "committed → notified"  // the wake-up transaction, the NOTIFY's delivery to the dispatcher
	segNotifyPass    = "notified → pass"       // the placer's wait for its pass (WakeGap, a pass in progress); 0 when a pass started before the notification placed the Run
	segPassOffer     = "pass → offer"          // the pass's candidate reads up to the offer's statement
	segOfferAnswered = "offer → poll answered" // the offer's transaction and commit, the hand-over to the waiting poll
	segAnsweredAck   = "poll answered → ACK"   // the poll's answer on the wire, the worker, the ACK's request up to its statement
	segTotal         = "admitted → running"
)

var segNames = []string{segAdmitCommit, segCommitNotify, segNotifyPass, segPassOffer, segOfferAnswered, segAnsweredAck, segTotal}

// segTrace gathers the Debug lines the segments need: the scheduler's admit commits and, of the
// dispatchers, every wake notification's arrival and every delivery's pass start and answer, by
// Run.
type segTrace struct {
	mu        sync.Mutex
	committed map[string]int64 // by Run: when its admit's commit returned at the replica, unix ms
	notes     [][]int64        // per dispatcher: the notifications' arrival, unix ms
	delivered map[string]delivery
}

type delivery struct {
	dispatcher       int
	woken            bool
	passMs, answered int64
}

func newSegTrace(dispatchers int) *segTrace {
	return &segTrace{committed: map[string]int64{}, notes: make([][]int64, dispatchers), delivered: map[string]delivery{}}
}

// collectAdmits is the `qlsched run` process's log line hook: its "admitted" Debug lines.
func (s *segTrace) collectAdmits(l map[string]any) {
	if l["msg"] != "admitted" {
		return
	}
	id, _ := l["run_id"].(string)
	at, _ := l["committed_ms"].(float64)
	if id != "" && at > 0 {
		s.mu.Lock()
		s.committed[id] = int64(at)
		s.mu.Unlock()
	}
}

// collect is dispatcher i's log line hook (loopChild).
func (s *segTrace) collect(i int) func(map[string]any) {
	return func(l map[string]any) {
		switch l["msg"] {
		case "dispatch wake notification":
			at, _ := l["at_ms"].(float64)
			s.mu.Lock()
			s.notes[i] = append(s.notes[i], int64(at))
			s.mu.Unlock()
		case "dispatch offers delivered":
			ids, _ := l["run_ids"].([]any)
			pass, _ := l["pass_ms"].(float64)
			ans, _ := l["answered_ms"].(float64)
			woken, _ := l["woken"].(bool)
			s.mu.Lock()
			for _, id := range ids {
				if id, ok := id.(string); ok {
					s.delivered[id] = delivery{dispatcher: i, woken: woken, passMs: int64(pass), answered: int64(ans)}
				}
			}
			s.mu.Unlock()
		}
	}
}

// SegmentSummary is what the segments saw besides the percentiles: how many Runs each dispatcher
// placed, how many by a woken pass, how many had no delivery line (not counted).
type SegmentSummary struct {
	PlacedBy     []int `json:"placed_by"`
	Woken        int   `json:"woken"`
	Untraced     int   `json:"untraced"`
	BeforeNotify int   `json:"placed_before_notified"`
}

// segRunsHeader is the first line of the per-Run file (--segments-file): one line per window Run,
// its times in unix ms (committed 0 when the replica's line was not seen), tab-separated.
const segRunsHeader = "run_id\tqueued_ms\tcommitted_ms\tnotified_ms\tpass_ms\toffered_ms\tanswered_ms\tstarted_ms\tdispatcher\twoken\n"

// segments joins the Runs' database times with the trace; runs, when not nil, receives each
// traced Run's times (segRunsHeader).
func (s *segTrace) segments(rows []db.BenchLoopRunTimesRow, runs io.Writer) ([]LoopSegment, SegmentSummary) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum := SegmentSummary{PlacedBy: make([]int, len(s.notes))}
	for _, n := range s.notes {
		slices.Sort(n)
	}
	vals := make([][]int64, len(segNames))
	for _, r := range rows {
		d, ok := s.delivered[r.RunID.String()]
		if !ok {
			sum.Untraced++
			continue
		}
		sum.PlacedBy[d.dispatcher]++
		if d.woken {
			sum.Woken++
		}
		// the Run's notification: the first to arrive at its dispatcher at or after its admit
		notes := s.notes[d.dispatcher]
		k, _ := slices.BinarySearch(notes, r.QueuedAtMs)
		notified := d.passMs // no notification: the segment is the pass's
		if k < len(notes) && notes[k] <= d.answered {
			notified = notes[k]
		}
		notifyPass := d.passMs - notified
		if notifyPass < 0 {
			sum.BeforeNotify++
			notifyPass = 0
		}
		if c, ok := s.committed[r.RunID.String()]; ok {
			vals[0] = append(vals[0], c-r.QueuedAtMs)
			vals[1] = append(vals[1], notified-c)
		}
		if runs != nil {
			fmt.Fprintf(runs, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%t\n", r.RunID, r.QueuedAtMs, s.committed[r.RunID.String()],
				notified, d.passMs, r.OfferedAtMs, d.answered, r.StartedAtMs, d.dispatcher, d.woken)
		}
		for i, v := range []int64{notifyPass, r.OfferedAtMs - d.passMs,
			d.answered - r.OfferedAtMs, r.StartedAtMs - d.answered, r.StartedAtMs - r.QueuedAtMs} {
			vals[i+2] = append(vals[i+2], v)
		}
	}
	out := make([]LoopSegment, len(segNames))
	for i, name := range segNames {
		v := vals[i]
		slices.Sort(v)
		out[i] = LoopSegment{Name: name, Runs: len(v), P50Ms: percentileCont(v, 0.5), P99Ms: percentileCont(v, 0.99)}
		if len(v) > 0 {
			out[i].MaxMs = v[len(v)-1]
		}
	}
	return out, sum
}

// percentileCont is PostgreSQL's percentile_cont over sorted v (0 when empty).
func percentileCont(v []int64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	x := p * float64(len(v)-1)
	lo := int(math.Floor(x))
	hi := min(lo+1, len(v)-1)
	return float64(v[lo]) + (x-float64(lo))*float64(v[hi]-v[lo])
}

func segmentsText(segs []LoopSegment, sum SegmentSummary) string {
	var b strings.Builder
	for _, s := range segs {
		fmt.Fprintf(&b, "    %-24s p50 %6.1fms  p99 %6.1fms  max %5dms  (%d Runs)\n", s.Name, s.P50Ms, s.P99Ms, s.MaxMs, s.Runs)
	}
	fmt.Fprintf(&b, "    placed by dispatcher %v; %d by a woken pass, %d placed before their notification arrived, %d untraced\n",
		sum.PlacedBy, sum.Woken, sum.BeforeNotify, sum.Untraced)
	return b.String()
}
