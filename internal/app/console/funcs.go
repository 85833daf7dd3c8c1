package console

import (
	"fmt"
	"html/template"
	"strconv"
	"time"

	"github.com/qlcontrol/controlcore/admin"
)

// funcs are the templates' helpers: times in UTC and in a trigger's zone, durations, capped
// counts. Each returns plain text; html/template escapes it.
func (s *server) funcs() template.FuncMap {
	return template.FuncMap{
		"utc":    utc,
		"utcp":   func(ms *int64) string { return utcPtr(ms) },
		"inzone": s.inZone,
		"ago":    ago,
		"dur":    func(ms int64) string { return (time.Duration(ms) * time.Millisecond).String() },
		"capped": func(n int64) string {
			if n >= admin.CountCap {
				return "≥ " + strconv.FormatInt(admin.CountCap, 10)
			}
			return strconv.FormatInt(n, 10)
		},
		"lag": func(r admin.Run) string {
			if lag, ok := r.LagMs(); ok {
				return (time.Duration(lag) * time.Millisecond).String()
			}
			return "-"
		},
		"deref": func(p *string) string {
			if p == nil {
				return ""
			}
			return *p
		},
		"claim": claimState,
		"free":  free,
		"durp": func(ms *int64) string {
			if ms == nil {
				return "-"
			}
			return (time.Duration(*ms) * time.Millisecond).String()
		},
		"agop": func(ms *int64, nowMs int64) string {
			if ms == nil {
				return "-"
			}
			return ago(*ms, nowMs)
		},
		"text": func(b []byte) string { return string(b) },
		"deri": func(p *int) string { return derefInt(p) },
	}
}

// free is what a worker session could still take: its capacity less what it holds (live offers
// and active leases), never below 0; a draining session takes nothing more.
func free(x admin.WorkerSession) int64 {
	if x.State != "active" {
		return 0
	}
	return max(int64(x.Capacity)-x.InFlight, 0)
}

func derefInt(p *int) string {
	if p == nil {
		return "-"
	}
	return strconv.Itoa(*p)
}

func utc(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05Z")
}

func utcPtr(ms *int64) string {
	if ms == nil {
		return "-"
	}
	return utc(*ms)
}

// inZone renders a database time in a trigger's zone; an unknown zone says so.
func (s *server) inZone(ms *int64, zone string) string {
	if ms == nil {
		return "-"
	}
	loc, ok := s.zones.Load(zone)
	if !ok {
		l, err := time.LoadLocation(zone)
		if err != nil {
			l = nil
		}
		loc, _ = s.zones.LoadOrStore(zone, l)
	}
	l, _ := loc.(*time.Location)
	if l == nil {
		return "(unknown zone " + zone + ")"
	}
	return time.UnixMilli(*ms).In(l).Format("2006-01-02 15:04:05 MST")
}

// ago renders how long before now (both the database's) a time lies.
func ago(ms, nowMs int64) string {
	if ms == 0 {
		return "-"
	}
	d := time.Duration(nowMs-ms) * time.Millisecond
	if d < 0 {
		return "in " + (-d).Round(time.Second).String()
	}
	return d.Round(time.Second).String() + " ago"
}

// claimState says whether a schedule row is claimed now, by whom and until when.
func claimState(t admin.Trigger) string {
	switch {
	case t.ClaimOwner == nil:
		return "unclaimed"
	case t.ClaimLive():
		return fmt.Sprintf("claimed by %s, expires %s", *t.ClaimOwner, ago(*t.ClaimExpiresAtMs, t.NowMs))
	default:
		return fmt.Sprintf("expired claim of %s", *t.ClaimOwner)
	}
}

// chart is the overview's per-project SVG: admissions per minute as bars, the minute's p99
// admission lag as a line, both scaled to their own maximum. Coordinates are computed here; the
// template writes them as attributes (no inline style, which the CSP forbids).
type chart struct {
	Width, Height int
	Bars          []bar
	LagPoints     string
	MaxAdmissions int64
	MaxLagMs      int64
}

type bar struct {
	X, Y, W, H int
	Title      string
}

const (
	chartWidth  = 360
	chartHeight = 64
)

func newChart(minutes []admin.MinuteAdmissions) chart {
	c := chart{Width: chartWidth, Height: chartHeight}
	for _, m := range minutes {
		c.MaxAdmissions = max(c.MaxAdmissions, m.Admissions)
		c.MaxLagMs = max(c.MaxLagMs, m.LagP99Ms)
	}
	if len(minutes) == 0 {
		return c
	}
	w := chartWidth / len(minutes)
	var points []byte
	for i, m := range minutes {
		x := i * w
		h := 0
		if c.MaxAdmissions > 0 {
			h = int(m.Admissions * (chartHeight - 2) / c.MaxAdmissions)
		}
		if m.Admissions > 0 && h == 0 {
			h = 1
		}
		c.Bars = append(c.Bars, bar{X: x, Y: chartHeight - h, W: max(w-1, 1), H: h,
			Title: fmt.Sprintf("%s: %d admitted, lag p50 %s, p99 %s", time.UnixMilli(m.StartMs).UTC().Format("15:04Z"), m.Admissions,
				time.Duration(m.LagP50Ms)*time.Millisecond, time.Duration(m.LagP99Ms)*time.Millisecond)})
		y := chartHeight - 1
		if c.MaxLagMs > 0 {
			y = chartHeight - 1 - int(m.LagP99Ms*(chartHeight-2)/c.MaxLagMs)
		}
		if i > 0 {
			points = append(points, ' ')
		}
		points = fmt.Appendf(points, "%d,%d", x+w/2, y)
	}
	c.LagPoints = string(points)
	return c
}
