package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/internal/app/verify"
)

// Page sizes: what one page shows, each far under admin.MaxConsolePage.
const (
	triggersPerPage  = 100
	runsPerPage      = 50
	upcomingShown    = 10
	recentRunsShown  = 20
	workersShown     = 500
	maxQueryParamLen = 200
)

// layout is what every page's frame shows.
type layout struct {
	Title   string
	Nav     string // the active section
	Refresh int    // seconds; 0: the page does not reload itself
	NowMs   int64
}

func (s *server) overview(w http.ResponseWriter, r *http.Request) {
	if !s.noParams(w, r) {
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	ov, err := s.opts.Reader.Overview(ctx)
	if err != nil {
		s.readFailed(w, r, err)
		return
	}
	type project struct {
		admin.ProjectOverview
		Chart chart
	}
	data := struct {
		layout
		Projects []project
		Cap      int64
		Window   string
	}{layout: layout{Title: "Overview", Nav: "overview", Refresh: int(s.opts.Refresh / time.Second), NowMs: ov.NowMs},
		Cap: admin.CountCap, Window: "hour"}
	for _, p := range ov.Projects {
		data.Projects = append(data.Projects, project{p, newChart(p.Minutes)})
	}
	s.render(w, r, "overview", data)
}

func (s *server) project(w http.ResponseWriter, r *http.Request) {
	q, ok := s.params(w, r, "after")
	if !ok {
		return
	}
	project := r.PathValue("project")
	ctx, cancel := s.ctx(r)
	defer cancel()
	p, rows, err := s.opts.Reader.ProjectTriggers(ctx, admin.TriggerPage{Project: project, After: q.Get("after"), Limit: triggersPerPage})
	if err != nil {
		s.readFailed(w, r, err)
		return
	}
	data := struct {
		layout
		Project  admin.Project
		Triggers []admin.TriggerRow
		After    string
		Next     string
	}{layout: layout{Title: "Project " + project, Nav: "project"}, Project: p, Triggers: rows, After: q.Get("after")}
	if len(rows) > 0 {
		data.NowMs = rows[0].NowMs
	}
	if len(rows) == triggersPerPage {
		data.Next = rows[len(rows)-1].TriggerID
	}
	s.render(w, r, "project", data)
}

func (s *server) trigger(w http.ResponseWriter, r *http.Request) {
	if !s.noParams(w, r) {
		return
	}
	project, trigger := r.PathValue("project"), r.PathValue("trigger")
	ctx, cancel := s.ctx(r)
	defer cancel()
	detail, err := s.opts.Reader.ShowTrigger(ctx, admin.TriggerShow{Project: project, Trigger: trigger, Upcoming: upcomingShown, Runs: recentRunsShown})
	if err != nil {
		s.readFailed(w, r, err)
		return
	}
	history, err := s.opts.Reader.TriggerHistory(ctx, project, trigger)
	if err != nil {
		s.readFailed(w, r, err)
		return
	}
	data := struct {
		layout
		T       admin.TriggerDetail
		History []admin.TriggerRevision
	}{layout: layout{Title: "Trigger " + project + "/" + trigger, Nav: "project", NowMs: detail.NowMs}, T: detail, History: history}
	s.render(w, r, "trigger", data)
}

func (s *server) runs(w http.ResponseWriter, r *http.Request) {
	q, ok := s.params(w, r, "trigger", "state", "since", "before", "before_run")
	if !ok {
		return
	}
	page := admin.RunPage{Project: r.PathValue("project"), Trigger: q.Get("trigger"), State: q.Get("state"), Limit: runsPerPage}
	var err error
	if page.SinceMs, err = parseSince(q.Get("since")); err != nil {
		s.fail(w, r, http.StatusBadRequest, "since: "+err.Error())
		return
	}
	if v := q.Get("before"); v != "" {
		if page.Before, err = strconv.ParseInt(v, 10, 64); err != nil || page.Before <= 0 {
			s.fail(w, r, http.StatusBadRequest, "before: want a positive time in milliseconds (the next link sets it)")
			return
		}
	}
	if v := q.Get("before_run"); v != "" {
		if page.BeforeRun, err = uuid.Parse(v); err != nil {
			s.fail(w, r, http.StatusBadRequest, "before_run: want a Run id (the next link sets it)")
			return
		}
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	runs, err := s.opts.Reader.RunsPage(ctx, page)
	if err != nil {
		s.readFailed(w, r, err)
		return
	}
	data := struct {
		layout
		Project, Trigger, State, Since string
		States                         []string
		Runs                           []admin.Run
		Next                           template.URL
	}{layout: layout{Title: "Runs of " + page.Project, Nav: "project"}, Project: page.Project, Trigger: page.Trigger,
		State: page.State, Since: q.Get("since"), States: admin.RunStates, Runs: runs}
	if len(runs) == runsPerPage {
		last := runs[len(runs)-1]
		next := url.Values{}
		for _, k := range []string{"trigger", "state", "since"} {
			if v := q.Get(k); v != "" {
				next.Set(k, v)
			}
		}
		if page.Trigger != "" && last.ScheduledForMs != nil {
			next.Set("before", strconv.FormatInt(*last.ScheduledForMs, 10))
		} else {
			next.Set("before", strconv.FormatInt(last.CreatedAtMs, 10))
			next.Set("before_run", last.RunID.String())
		}
		// a URL this code built from a validated project id and encoded values: nothing to filter
		data.Next = template.URL("/projects/" + page.Project + "/runs?" + next.Encode()) //nolint:gosec // see above

	}
	s.render(w, r, "runs", data)
}

// workers lists the live worker sessions: one range of the live sessions' index (admin's
// WorkerSessions), up to workersShown; ended sessions are not listed (no index bounds them).
func (s *server) workers(w http.ResponseWriter, r *http.Request) {
	if !s.noParams(w, r) {
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	sessions, more, err := s.opts.Reader.WorkerSessions(ctx, admin.WorkerFilter{Limit: workersShown})
	if err != nil {
		s.readFailed(w, r, err)
		return
	}
	data := struct {
		layout
		Sessions             []admin.WorkerSession
		More                 bool
		Shown                int
		Capacity, Leases     int64
		Offers, Free, Drains int64
	}{layout: layout{Title: "Workers", Nav: "workers", Refresh: int(s.opts.Refresh / time.Second)}, Sessions: sessions, More: more,
		Shown: workersShown}
	for _, x := range sessions {
		data.NowMs = x.NowMs
		data.Capacity += int64(x.Capacity)
		data.Leases += x.Leases
		data.Offers += x.Offers
		data.Free += free(x)
		if x.State == "draining" {
			data.Drains++
		}
	}
	s.render(w, r, "workers", data)
}

// replicas lists the scheduler replicas' registrations (admin's Replicas, pg-0024), one per owner:
// live ones and the expired rows of replicas that crashed.
func (s *server) replicas(w http.ResponseWriter, r *http.Request) {
	if !s.noParams(w, r) {
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	rows, err := s.opts.Reader.Replicas(ctx)
	if err != nil {
		s.readFailed(w, r, err)
		return
	}
	data := struct {
		layout
		Replicas []admin.Replica
		Live     int
	}{layout: layout{Title: "Replicas", Nav: "replicas", Refresh: int(s.opts.Refresh / time.Second)}, Replicas: rows}
	for _, x := range rows {
		data.NowMs = x.NowMs
		if x.Live {
			data.Live++
		}
	}
	s.render(w, r, "replicas", data)
}

// run shows one Run's story, as `qlsched runs show` tells it (admin's RunStory): its admission,
// every Attempt with its worker, lease and outcome, its newest offers and events.
func (s *server) run(w http.ResponseWriter, r *http.Request) {
	if !s.noParams(w, r) {
		return
	}
	id, err := uuid.Parse(r.PathValue("run"))
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, "run: want a Run id (a UUID)")
		return
	}
	if r.PathValue("run") != id.String() { // uppercase, braced, urn:uuid: or unhyphenated: one address per Run
		http.Redirect(w, r, "/runs/"+id.String(), http.StatusMovedPermanently)
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	story, err := s.opts.Reader.RunStory(ctx, id, admin.StoryLimits{})
	if err != nil {
		s.readFailed(w, r, err)
		return
	}
	s.render(w, r, "run", struct {
		layout
		R admin.RunStory
	}{layout{Title: "Run " + id.String(), Nav: "project", NowMs: story.NowMs}, story})
}

func (s *server) health(w http.ResponseWriter, r *http.Request) {
	if !s.noParams(w, r) {
		return
	}
	if s.opts.Health == nil {
		s.fail(w, r, http.StatusNotFound, "schema health is not wired in this console")
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	rep, err := s.opts.Health(ctx)
	if err != nil {
		s.readFailed(w, r, err)
		return
	}
	s.render(w, r, "health", struct {
		layout
		R *verify.Report
	}{layout{Title: "Schema health", Nav: "health"}, rep})
}

// parseSince reads the runs filter's lower time bound: empty, RFC 3339, or the form's
// datetime-local value (YYYY-MM-DDTHH:MM, read as UTC).
func parseSince(v string) (int64, error) {
	if v == "" {
		return 0, nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			if t.UnixMilli() <= 0 {
				return 0, errors.New("want a time after 1970")
			}
			return t.UnixMilli(), nil
		}
	}
	return 0, errors.New("want a time such as 2026-12-05T06:00:00Z or 2026-12-05T06:00 (UTC)")
}

// params refuses unknown, repeated and overlong query parameters: a page reads only the ones it
// names, and a typo should say so rather than show an unfiltered page.
func (s *server) params(w http.ResponseWriter, r *http.Request, allowed ...string) (url.Values, bool) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, "the query string does not parse")
		return nil, false
	}
	for k, vs := range q {
		known := false
		for _, a := range allowed {
			known = known || a == k
		}
		switch {
		case !known:
			s.fail(w, r, http.StatusBadRequest, fmt.Sprintf("unknown parameter %q: this page takes %s", clip(k, 64), orNone(allowed)))
			return nil, false
		case len(vs) > 1:
			s.fail(w, r, http.StatusBadRequest, fmt.Sprintf("parameter %q given %d times: want it once", k, len(vs)))
			return nil, false
		case len(vs[0]) > maxQueryParamLen:
			s.fail(w, r, http.StatusBadRequest, fmt.Sprintf("parameter %q is longer than %d bytes", k, maxQueryParamLen))
			return nil, false
		}
	}
	return q, true
}

func (s *server) noParams(w http.ResponseWriter, r *http.Request) bool {
	_, ok := s.params(w, r)
	return ok
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func (s *server) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.opts.RequestTimeout)
}

// readFailed maps a reader's error: a field at fault is the request's (400, naming it), a missing
// object 404, anything else the database's (500; the details go to the log, not the page).
func (s *server) readFailed(w http.ResponseWriter, r *http.Request, err error) {
	var fe *admin.FieldError
	switch {
	case errors.As(err, &fe):
		s.fail(w, r, http.StatusBadRequest, err.Error())
	case errors.Is(err, admin.ErrNotFound):
		s.fail(w, r, http.StatusNotFound, err.Error())
	default:
		s.opts.Log.Error("console read failed", "path", r.URL.Path, "err", err)
		s.fail(w, r, http.StatusInternalServerError, "the database read failed; the console's log says why")
	}
}

func (s *server) fail(w http.ResponseWriter, r *http.Request, code int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	s.write(w, r, "error", struct {
		layout
		Code    int
		Message string
	}{layout{Title: http.StatusText(code)}, code, msg})
}

func (s *server) render(w http.ResponseWriter, r *http.Request, page string, data any) {
	var buf bytes.Buffer
	if err := s.pages[page].Execute(&buf, data); err != nil {
		s.opts.Log.Error("console render failed", "page", page, "err", err)
		http.Error(w, "rendering failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = buf.WriteTo(w)
}

// write renders after the status is sent (error pages).
func (s *server) write(w http.ResponseWriter, _ *http.Request, page string, data any) {
	if err := s.pages[page].Execute(w, data); err != nil {
		s.opts.Log.Error("console render failed", "page", page, "err", err)
	}
}

// clip shortens what a request named to at most n runes for an error message: the name of an
// unknown parameter is the client's, and may be as long as the URL.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}
