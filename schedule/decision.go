package schedule

// The cron + misfire decision maker. Everything in this file is pure: no I/O, no
// database and no clock. Times are int64 milliseconds since the Unix epoch as
// observed by PostgreSQL and passed in. docs/scheduling.md states the rules in
// prose; the doc comments of ParseSchedule, Schedule.Next and Decide are the
// authoritative short form.

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// ErrInvalidSchedule is wrapped by every error of ParseSchedule, so that callers
// (the trigger publisher, the CLI's exit code 2) can branch with errors.Is.
var ErrInvalidSchedule = errors.New("invalid schedule")

// ErrInvalidMisfirePolicy is wrapped by every error of ParseMisfirePolicy.
var ErrInvalidMisfirePolicy = errors.New("invalid misfire policy")

// MisfirePolicy says what happens when more than one occurrence of a schedule is
// due at once, typically after an outage.
type MisfirePolicy string

const (
	// MisfireSkip advances the cursor past every due occurrence and admits nothing.
	MisfireSkip MisfirePolicy = "skip"
	// MisfireFireOnce admits exactly one Run, for the most recent due occurrence,
	// and advances the cursor past all of them. It never replays a backlog.
	MisfireFireOnce MisfirePolicy = "fire_once"
)

// ParseMisfirePolicy returns the policy named s ("skip" or "fire_once", exactly).
func ParseMisfirePolicy(s string) (MisfirePolicy, error) {
	switch p := MisfirePolicy(s); p {
	case MisfireSkip, MisfireFireOnce:
		return p, nil
	}
	return "", fmt.Errorf("%w %q: want %q or %q", ErrInvalidMisfirePolicy, s, MisfireSkip, MisfireFireOnce)
}

// descriptors are the named schedules ParseSchedule accepts; the value says
// whether the descriptor is a fixed-time schedule (see Schedule.Next).
var descriptors = map[string]bool{
	"@yearly":   true,
	"@annually": true,
	"@monthly":  true,
	"@weekly":   true,
	"@daily":    true,
	"@midnight": true,
	"@hourly":   false, // "0 * * * *": its hour field is a wildcard
}

// fieldParsers parse one field of a six-field spec alone, so that an error can
// name the field that is wrong (robfig's own messages do not).
var fieldParsers = [6]struct {
	name   string
	parser cron.Parser
}{
	{"seconds", cron.NewParser(cron.Second)},
	{"minute", cron.NewParser(cron.Minute)},
	{"hour", cron.NewParser(cron.Hour)},
	{"day-of-month", cron.NewParser(cron.Dom)},
	{"month", cron.NewParser(cron.Month)},
	{"day-of-week", cron.NewParser(cron.Dow)},
}

// specParser accepts five fields, or six with a leading seconds field, and descriptors.
var specParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Schedule is a parsed cron spec in an IANA time zone. It is immutable and safe
// for concurrent use.
type Schedule struct {
	spec string
	zone string
	loc  *time.Location
	// wall matches wall-clock fields: robfig's search runs in UTC, which has no
	// offset changes, and Next maps the wall-clock matches to instants itself.
	wall *cron.SpecSchedule
	// fixedTime is false when the minute or hour field begins with '*' (Vixie
	// cron's MIN_STAR/HR_STAR): such a spec follows elapsed time across an offset
	// change instead of wall-clock times.
	fixedTime bool
}

// ParseSchedule accepts the standard five fields (minute hour day-of-month month
// day-of-week), an optional leading seconds field (six fields), and the
// descriptors @yearly @annually @monthly @weekly @daily @midnight @hourly, in the
// IANA time zone timezone. It rejects @every (an interval trigger is not cron), a
// TZ=/CRON_TZ= prefix (the zone is a separate argument), an empty, unknown or
// host-dependent ("Local") zone name, and a spec that never fires (such as
// "0 0 30 2 *"). Every error wraps ErrInvalidSchedule and names the spec or zone
// and what is wrong with it.
func ParseSchedule(spec, timezone string) (*Schedule, error) {
	wall, fixedTime, err := parseSpec(spec)
	if err != nil {
		return nil, err
	}
	loc, err := loadZone(timezone)
	if err != nil {
		return nil, err
	}
	return &Schedule{spec: spec, zone: timezone, loc: loc, wall: wall, fixedTime: fixedTime}, nil
}

func parseSpec(spec string) (*cron.SpecSchedule, bool, error) {
	s := strings.TrimSpace(spec)
	switch {
	case s == "":
		return nil, false, fmt.Errorf("%w: cron spec is empty; want five fields (minute hour day-of-month month day-of-week), six with a leading seconds field, or a descriptor such as @daily", ErrInvalidSchedule)
	case strings.HasPrefix(s, "TZ=") || strings.HasPrefix(s, "CRON_TZ="):
		return nil, false, fmt.Errorf("%w: cron spec %q: a TZ=/CRON_TZ= prefix is not allowed; give the time zone separately (--timezone)", ErrInvalidSchedule, spec)
	case s == "@every" || strings.HasPrefix(s, "@every "):
		return nil, false, fmt.Errorf("%w: cron spec %q: @every is an interval trigger, not cron; use a cron spec such as \"*/5 * * * *\"", ErrInvalidSchedule, spec)
	}

	var fixedTime bool
	if strings.HasPrefix(s, "@") {
		fixed, ok := descriptors[s]
		if !ok {
			return nil, false, fmt.Errorf("%w: cron spec %q: unknown descriptor; want one of @yearly @annually @monthly @weekly @daily @midnight @hourly", ErrInvalidSchedule, spec)
		}
		fixedTime = fixed
	} else {
		fields := strings.Fields(s)
		if len(fields) != 5 && len(fields) != 6 {
			return nil, false, fmt.Errorf("%w: cron spec %q: found %d fields; want 5 (minute hour day-of-month month day-of-week) or 6 with a leading seconds field", ErrInvalidSchedule, spec, len(fields))
		}
		first := 6 - len(fields) // index into fieldParsers of fields[0]
		for i, f := range fields {
			fp := fieldParsers[first+i]
			if _, err := fp.parser.Parse(f); err != nil {
				return nil, false, fmt.Errorf("%w: cron spec %q: %s field %q: %v", ErrInvalidSchedule, spec, fp.name, f, err)
			}
		}
		minute, hour := fields[1-first], fields[2-first]
		fixedTime = !isWildcard(minute) && !isWildcard(hour)
	}

	parsed, err := specParser.Parse(s)
	if err != nil { // unreachable after the checks above; kept so a robfig change cannot slip through
		return nil, false, fmt.Errorf("%w: cron spec %q: %v", ErrInvalidSchedule, spec, err)
	}
	wall, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return nil, false, fmt.Errorf("%w: cron spec %q: not a calendar schedule", ErrInvalidSchedule, spec)
	}
	wall.Location = time.UTC // never time.Local: the wall-clock search must not depend on the host
	if !canFire(wall) {
		return nil, false, fmt.Errorf("%w: cron spec %q never fires: no month it allows has a day of month it allows (February has at most 29 days; April, June, September and November have 30)", ErrInvalidSchedule, spec)
	}
	return wall, fixedTime, nil
}

// isWildcard reports whether a field begins with '*' ('?' is robfig's synonym),
// the Vixie/cronie test that makes a job follow elapsed time across DST changes.
func isWildcard(field string) bool {
	return strings.HasPrefix(field, "*") || strings.HasPrefix(field, "?")
}

// starBit is robfig's marker for a field written as '*' or '?'.
const starBit = uint64(1) << 63

// canFire reports whether some calendar day satisfies the day-of-month, month and
// day-of-week fields. With both day fields restricted robfig matches either, and
// every month has every weekday; with day-of-month unrestricted every month has
// every weekday too. Only a restricted day-of-month combined with an unrestricted
// day-of-week can name days that do not exist, such as 30 February.
func canFire(s *cron.SpecSchedule) bool {
	if s.Dow&starBit == 0 || s.Dom&starBit != 0 {
		return true
	}
	daysIn := [13]uint{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}
	for m := uint(1); m <= 12; m++ {
		if s.Month&(1<<m) == 0 {
			continue
		}
		for d := uint(1); d <= daysIn[m]; d++ {
			if s.Dom&(1<<d) != 0 {
				return true
			}
		}
	}
	return false
}

var hostDependentZones = map[string]bool{"Local": true, "localtime": true, "posixrules": true, "Factory": true}

func loadZone(name string) (*time.Location, error) {
	switch name {
	case "":
		return nil, fmt.Errorf("%w: time zone is empty; want an IANA name such as Europe/Berlin, or UTC", ErrInvalidSchedule)
	}
	// Names that resolve to a file of the host's zoneinfo that is not an IANA zone, or to the
	// host's own setting: two hosts (or a minimal container, which has only the embedded tzdata)
	// would read the same trigger in different zones, or not at all.
	if hostDependentZones[name] || strings.HasPrefix(name, "posix/") || strings.HasPrefix(name, "right/") {
		return nil, fmt.Errorf("%w: time zone %q depends on the host; want an IANA name such as Europe/Berlin, or UTC", ErrInvalidSchedule, name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%w: time zone %q is not a known IANA time zone: %v", ErrInvalidSchedule, name, err)
	}
	return loc, nil
}

// Spec returns the cron spec exactly as given to ParseSchedule.
func (s *Schedule) Spec() string { return s.spec }

// TimeZone returns the IANA time zone name exactly as given to ParseSchedule.
func (s *Schedule) TimeZone() string { return s.zone }

// NoOccurrence is what Next returns when it finds no occurrence: only past the
// year 9999, or (never, for a schedule ParseSchedule accepted) when nothing fires
// within 16 years.
const NoOccurrence int64 = math.MaxInt64

const (
	maxSupportedMs = 253402300799999 // 9999-12-31T23:59:59.999Z
	secondsPerYear = 366 * 24 * 3600
	searchHorizon  = 16 * secondsPerYear // a valid spec fires at least every 8 years (29 February across 2100)
	robfigHorizon  = 5 * 365 * 24 * 3600 // robfig searches at least this far before giving up
)

// Next returns the first occurrence strictly after afterMs, in milliseconds.
// Occurrences fall on whole seconds. A matching wall-clock time of the zone maps
// to instants as follows:
//   - it exists once: that instant;
//   - it falls in a gap where clocks jump forward (DST start): a fixed-time spec
//     fires once at the first instant after the gap, all matches of one gap (and a
//     match at the instant after it) collapsing into that single occurrence; a
//     spec whose minute or hour field begins with '*' does not fire for it;
//   - it repeats where clocks fall back (DST end): a fixed-time spec fires at the
//     first of the two instants only; a spec whose minute or hour field begins
//     with '*' fires at both, because it follows elapsed time.
//
// Next returns NoOccurrence past the year 9999.
func (s *Schedule) Next(afterMs int64) int64 {
	if afterMs >= maxSupportedMs {
		return NoOccurrence
	}
	sec := floorDiv(afterMs, 1000) + 1 // the first whole second strictly after afterMs
	limit := sec + searchHorizon
	for sec <= limit {
		t := time.Unix(sec, 0).In(s.loc)
		_, off := t.Zone()
		start, end := t.ZoneBounds()
		startSec, endSec := int64(math.MinInt64), int64(math.MaxInt64)
		if !start.IsZero() {
			startSec = start.Unix()
		}
		if !end.IsZero() {
			endSec = end.Unix()
		}
		if endSec <= sec {
			// Past its transition table Go derives periods from the zone's rule
			// per UTC year and, on the last day of a leap year, reports a period
			// that ended already (time.tzset adds 365 days, not 366). The offset
			// it reports holds until the next UTC year begins.
			endSec = time.Date(time.Unix(sec, 0).UTC().Year()+1, time.January, 1, 0, 0, 0, 0, time.UTC).Unix()
		}
		prevOff := off // the offset before this zone period began
		if startSec != math.MinInt64 {
			_, prevOff = time.Unix(startSec-1, 0).In(s.loc).Zone()
		}

		// Clocks jumped forward at startSec: a fixed-time match inside the gap fires
		// at startSec itself, provided startSec is still strictly after afterMs.
		if s.fixedTime && startSec == sec && prevOff < off {
			if w, ok := s.wallNext(startSec + int64(prevOff)); ok && w < startSec+int64(off) {
				return sec * 1000
			}
		}

		w, ok := s.wallNext(sec + int64(off))
		if !ok { // nothing within robfig's horizon of this wall-clock time
			sec = min(endSec, sec+robfigHorizon)
			continue
		}
		at := w - int64(off)
		if at >= endSec { // the match belongs to a later zone period
			sec = endSec
			continue
		}
		// Clocks fell back at startSec: wall-clock times before startSec+prevOff
		// already happened once, in the previous period.
		if s.fixedTime && prevOff > off && w < startSec+int64(prevOff) {
			sec = startSec + int64(prevOff-off)
			continue
		}
		return at * 1000
	}
	return NoOccurrence
}

// wallNext returns the first wall-clock second >= wallSec (wall-clock fields read
// as if UTC) that matches the spec; ok is false if robfig finds none within its
// horizon.
func (s *Schedule) wallNext(wallSec int64) (w int64, ok bool) {
	n := s.wall.Next(time.Unix(wallSec-1, 0).UTC())
	if n.IsZero() {
		return 0, false
	}
	return n.Unix(), true
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// DecisionKind is what the coordinator does with a claimed schedule row.
type DecisionKind string

const (
	// DecisionInit: the cursor was NULL; set the first cursor and admit nothing.
	DecisionInit DecisionKind = "init"
	// DecisionNotDue: the cursor is in the future; release the claim untouched.
	DecisionNotDue DecisionKind = "not_due"
	// DecisionFire: admit one Run for ScheduledForMs and advance the cursor to NextFireAtMs.
	DecisionFire DecisionKind = "fire"
	// DecisionSkip: advance the cursor to NextFireAtMs only and admit nothing.
	DecisionSkip DecisionKind = "skip"
)

// MaxMissedCount caps Decision.Missed. Counting missed occurrences takes one step
// each, so the count stops here; a Missed equal to MaxMissedCount means "at least
// this many".
const MaxMissedCount = 10_000

// The misfire grace of a trigger revision (docs/scheduling.md, "The decision"): an
// occurrence at most this late is on time under both policies. Stored in whole
// milliseconds (trigger_revisions.misfire_grace_ms, whose CHECK holds the same bounds).
const (
	// DefaultMisfireGrace is Quartz's misfire threshold (60 s). It is more than the
	// claim lease (30 s) plus the round cadence (1 s), so a replica that dies holding
	// a claim costs no occurrence: the takeover comes within the grace.
	DefaultMisfireGrace = 60 * time.Second
	// MinMisfireGrace: a smaller grace is shorter than the round cadence, and a round
	// sees an occurrence only after it is due, so skip would drop nearly every one.
	MinMisfireGrace = time.Second
	// MaxMisfireGrace bounds what an outage can release at once: at most
	// grace/period + 1 on-time Runs of a trigger.
	MaxMisfireGrace = 24 * time.Hour
)

// ErrInvalidMisfireGrace is wrapped by every error of CheckMisfireGrace.
var ErrInvalidMisfireGrace = errors.New("invalid misfire grace")

// CheckMisfireGrace accepts a grace of whole milliseconds between MinMisfireGrace and
// MaxMisfireGrace, inclusive.
func CheckMisfireGrace(g time.Duration) error {
	switch {
	case g < MinMisfireGrace || g > MaxMisfireGrace:
		return fmt.Errorf("%w %s: want %s to %s", ErrInvalidMisfireGrace, g, MinMisfireGrace, MaxMisfireGrace)
	case g%time.Millisecond != 0:
		return fmt.Errorf("%w %s: want whole milliseconds", ErrInvalidMisfireGrace, g)
	}
	return nil
}

// Occurrences is all Decide needs of a trigger kind: its occurrences, one at a time. Next returns
// the first occurrence strictly after afterMs (milliseconds since the epoch), or NoOccurrence when
// there is none. It must be pure and monotone: a later afterMs never gives an earlier occurrence
// (the bounded search for the latest missed occurrence bisects on it). *Schedule, a cron spec in a
// time zone, is the one kind today; a new kind (an interval, say) is another implementation in
// this package, and the misfire policies, the grace and the step bound of Decide hold for it as
// they stand (docs/architecture.md, "A new trigger kind").
type Occurrences interface {
	Next(afterMs int64) int64
}

var _ Occurrences = (*Schedule)(nil)

// Decision is the outcome of Decide.
type Decision struct {
	Kind DecisionKind
	// ScheduledForMs is, for DecisionFire only, the occurrence admitted.
	ScheduledForMs int64
	// NextFireAtMs is the new cursor for init, fire and skip; it is strictly greater
	// than the current cursor. For init and skip it is also greater than the
	// observation time; for fire it is s.Next(ScheduledForMs), which may still be
	// due (an on-time occurrence the next claim decides). For not_due it is the
	// unchanged cursor.
	NextFireAtMs int64
	// Missed counts the occurrences beyond the grace passed over without a Run:
	// under skip all of them, under fire_once all but the one fired. It is exact
	// below MaxMissedCount and a lower bound when it equals MaxMissedCount.
	Missed int64
	// LastMissedMs is, when Missed > 0, the latest of those passed-over occurrences: under
	// skip the latest member of M, under fire_once the one before the occurrence fired. It
	// is 0 when Missed is 0.
	LastMissedMs int64
	// CatchUp is true for DecisionFire of an occurrence beyond the grace (fire_once).
	CatchUp bool
}

// Decide decides what to do with one claimed schedule row. It is pure: s (the
// trigger's occurrences; a cron *Schedule today), policy and graceMs (the misfire
// grace in milliseconds) come from the trigger revision, cursor is next_fire_at_ms
// (nil: waiting for initialisation) and claimedAtMs is the claim's observation of
// database time (the coordinator's Claim.ClaimedAtMs, claimed_at_ms in SQL; "now"
// below). Occurrences are those of s.Next (for cron, with its rules for DST gaps
// and repeats).
//
//   - init: cursor nil → DecisionInit, NextFireAtMs = s.Next(claimedAtMs), the first
//     occurrence strictly after now.
//   - not due: claimedAtMs < *cursor → DecisionNotDue; the row is released untouched.
//   - Otherwise the due occurrences are the cursor and every later occurrence
//     <= now. A due occurrence o is on time when now - o <= graceMs, else missed;
//     the missed ones, M, are the earliest (those before now - graceMs).
//   - The cursor on time (M empty): DecisionFire for *cursor, NextFireAtMs =
//     s.Next(*cursor), under both policies. A later on-time occurrence is then
//     still due, and the next claim of the row admits it the same way: each
//     occurrence within the grace gets its Run.
//   - M not empty, skip: every member of M is dropped (Missed = |M|). If the first
//     occurrence after M, F, is due (it is then on time), DecisionFire for F with
//     NextFireAtMs = s.Next(F); else DecisionSkip with NextFireAtMs = F =
//     s.Next(claimedAtMs).
//   - M not empty, fire_once: DecisionFire for L, the latest member of M, CatchUp,
//     Missed = |M|-1, NextFireAtMs = F = s.Next(L). The on-time occurrences after
//     L follow as above. At most one Run for all of M: never a backlog.
//   - Any policy other than fire_once is treated as skip, which never admits a
//     Run that skip would not. A graceMs below 0 counts as 0.
//
// The work is bounded however old the cursor is: M is counted up to
// MaxMissedCount steps (Missed is then a lower bound), and L is found by
// searching backwards from now - graceMs with doubling windows (1 s, 2 s, 4 s …)
// and then bisecting the last window to the millisecond: about log2(span/1 s) +
// log2(span/1 ms) more steps, some 60 for a five-year-old cursor.
//
// The cursor is trusted to be an occurrence of s, as every cursor Decide returns is.
func Decide(s Occurrences, policy MisfirePolicy, graceMs int64, cursor *int64, claimedAtMs int64) Decision {
	d, _ := decide(s, policy, graceMs, cursor, claimedAtMs)
	return d
}

// decide is Decide that also reports how many times it called s.Next, so that
// the step bound is tested rather than assumed.
func decide(s Occurrences, policy MisfirePolicy, graceMs int64, cursor *int64, claimedAtMs int64) (Decision, int) {
	steps := 0
	next := func(after int64) int64 {
		steps++
		return s.Next(after)
	}
	// onTime is the grace rule, written once: a due occurrence at most graceMs late.
	onTime := func(o int64) bool { return claimedAtMs-o <= max(graceMs, 0) }

	if cursor == nil {
		return Decision{Kind: DecisionInit, NextFireAtMs: next(claimedAtMs)}, steps
	}
	c := *cursor
	if claimedAtMs < c {
		return Decision{Kind: DecisionNotDue, NextFireAtMs: c}, steps
	}
	if onTime(c) {
		return Decision{Kind: DecisionFire, ScheduledForMs: c, NextFireAtMs: next(c)}, steps
	}

	// The cursor is missed. Count M on from it; one count past the cap lets
	// fire_once (|M|-1) reach the cap too. first ends as F, the first occurrence
	// after M, when the count finishes.
	// before ends as the member of M before latest (c when M has one member).
	missed, latest, before := int64(1), c, c
	first := next(c)
	for !onTime(first) && missed <= MaxMissedCount {
		missed++
		before, latest = latest, first
		first = next(first)
	}
	if !onTime(first) { // stopped early: latest need not be L
		// the greatest occurrence in (c, the last missed millisecond]
		latest = latestDue(next, c, claimedAtMs-max(graceMs, 0)-1)
		first = next(latest)
		if policy == MisfireFireOnce { // M has more than MaxMissedCount members: one lies in (c, L-1]
			before = latestDue(next, c, latest-1)
		}
	}

	if policy != MisfireFireOnce {
		m := min(missed, MaxMissedCount)
		if first <= claimedAtMs {
			return Decision{Kind: DecisionFire, ScheduledForMs: first, NextFireAtMs: next(first), Missed: m, LastMissedMs: latest}, steps
		}
		return Decision{Kind: DecisionSkip, NextFireAtMs: first, Missed: m, LastMissedMs: latest}, steps
	}
	d := Decision{
		Kind:           DecisionFire,
		ScheduledForMs: latest,
		NextFireAtMs:   first,
		Missed:         min(missed-1, MaxMissedCount),
		CatchUp:        true,
	}
	if d.Missed > 0 {
		d.LastMissedMs = before
	}
	return d, steps
}

// latestDue returns the greatest occurrence in (lo, now]; the caller knows one
// exists (next(lo) <= now). It widens a window backwards from now, doubling it,
// until the window holds an occurrence, then bisects: a = lo-side bound with
// next(a) <= now, b = now-side bound with next(b) > now.
func latestDue(next func(int64) int64, lo, now int64) int64 {
	a, b := lo, now
	for w := int64(1000); w < now-lo; w *= 2 {
		if next(now-w) <= now {
			a = now - w
			break
		}
		b = now - w
	}
	for b-a > 1 {
		m := a + (b-a)/2
		if next(m) <= now {
			a = m
		} else {
			b = m
		}
	}
	// next(a) <= now and nothing lies in (a+1, now]: next(a) = a+1 is the latest.
	return next(a)
}
