package admin

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/schedule"
)

// The readers of the web console (`qlsched ui`, internal/app/console). Each reads one page in one
// snapshot, and each is bounded whatever the size of the tables: counts stop at a cap, lists are
// pages walked by keyset along an index (sql/queries/console.sql says which).

// CountCap bounds every per-project count and walk of the operator's reads (status, project list,
// the console's overview): triggers, enabled ones, tasks, and the rows of the due range the
// backlog and live-claims walks read. A count equal to it means "at least". At 10,000 the overview
// took 1.8 s at 1,000,000 schedule rows (a probe of the revision per due row, past
// shared_buffers); at 1,000 its working set stays cached, and at 100,000 triggers exact counts
// took status seconds on a loaded server (issue 37).
const CountCap = 1000

// ConsoleWindow is the window of the overview's admissions and lag: the database's last hour.
const ConsoleWindow = time.Hour

// MaxConsolePage bounds the rows of one console page.
const MaxConsolePage = 500

// Overview is the console's first page: every project with its capped counts, live claims by
// owner and the admissions of the last ConsoleWindow.
type Overview struct {
	Projects []ProjectOverview
	NowMs    int64
}

// ProjectOverview is one project of the Overview. Triggers and Enabled stop at CountCap.
// Backlog and OldestOverdueMs come from the first CountCap rows of the due range; when the
// walk reached that cap (BacklogPartial) the backlog is a lower bound; the walk is oldest first,
// so an OldestOverdueMs it found is the oldest, but 0 (none found) does not then mean none. LiveClaimsByOwner
// comes from the newest CountCap rows of the due range; ClaimsPartial says the range holds
// more, so a claim may lie beyond the walk and the counts are lower bounds. Minutes holds one entry per
// minute of the window, oldest first, zero where nothing was admitted; the lag percentiles are
// over the whole window (0 without admissions).
type ProjectOverview struct {
	ProjectID         string
	State             string
	Triggers          int64
	Enabled           int64
	Backlog           int64
	BacklogPartial    bool
	OldestOverdueMs   int64
	LiveClaimsByOwner []OwnerClaims
	ClaimsPartial     bool
	Minutes           []MinuteAdmissions
	Admissions        int64
	LagP50Ms          int64
	LagP99Ms          int64
	// Queued counts the project's queued Runs up to CountCap (equal: at least); OldestReadyMs
	// is the ready time of the head of its queue, 0 when none is queued (readQueues).
	Queued        int64
	OldestReadyMs int64
}

// MinuteAdmissions is one minute of the admissions window: how many Runs the scheduler admitted,
// and the admission lag's p50 and p99 among them.
type MinuteAdmissions struct {
	StartMs    int64
	Admissions int64
	LagP50Ms   int64
	LagP99Ms   int64
}

// consoleSnapshot is snapshot for the console's readers: JIT off first (ConsoleNoJIT says why).
func (r *Reader) consoleSnapshot(ctx context.Context, fn func(q *db.Queries) error) error {
	return r.snapshot(ctx, func(q *db.Queries) error {
		if err := q.ConsoleNoJIT(ctx); err != nil {
			return fmt.Errorf("console settings: %w", err)
		}
		return fn(q)
	})
}

// Overview reads the console's overview in one snapshot.
func (r *Reader) Overview(ctx context.Context) (Overview, error) {
	var out Overview
	err := r.consoleSnapshot(ctx, func(q *db.Queries) error {
		projects, err := readProjectFigures(ctx, q)
		if err != nil {
			return err
		}
		claims, err := q.ProjectLiveClaims(ctx, CountCap)
		if err != nil {
			return fmt.Errorf("read live claims: %w", err)
		}
		window := ConsoleWindow.Milliseconds()
		admissions, err := q.ConsoleAdmissions(ctx, window)
		if err != nil {
			return fmt.Errorf("read admissions: %w", err)
		}
		queues, err := readQueues(ctx, q)
		if err != nil {
			return err
		}
		out.Projects = make([]ProjectOverview, 0, len(projects))
		index := map[string]int{}
		n := int(window / 60000)
		for i, p := range projects {
			out.NowMs = p.NowMs
			index[p.ProjectID] = i
			po := ProjectOverview{ProjectID: p.ProjectID, State: p.State, Triggers: p.Triggers, Enabled: p.Enabled,
				Backlog: p.Backlog, BacklogPartial: p.DuePartial, ClaimsPartial: p.DuePartial, OldestOverdueMs: p.OldestOverdueMs,
				LiveClaimsByOwner: []OwnerClaims{}, Minutes: make([]MinuteAdmissions, n)}
			for m := range po.Minutes {
				po.Minutes[m].StartMs = p.NowMs - window + int64(m)*60000
			}
			out.Projects = append(out.Projects, po)
		}
		for _, x := range queues {
			if i, ok := index[x.ProjectID]; ok {
				out.Projects[i].Queued, out.Projects[i].OldestReadyMs = x.Queued, x.OldestReadyMs
			}
		}
		for _, c := range claims {
			if i, ok := index[c.ProjectID]; ok {
				out.Projects[i].LiveClaimsByOwner = append(out.Projects[i].LiveClaimsByOwner, OwnerClaims{c.Owner, c.Claims})
			}
		}
		for _, m := range admissions {
			i, ok := index[m.ProjectID]
			if !ok {
				continue
			}
			if m.Minute < 0 { // the whole window
				p := &out.Projects[i]
				p.Admissions, p.LagP50Ms, p.LagP99Ms = m.Admissions, m.LagP50Ms, m.LagP99Ms
				continue
			}
			// the admissions statement ran a moment after the projects one: its last minute may
			// be one past the window's end as this read counts it
			k := min(int(m.Minute), n-1)
			mm := &out.Projects[i].Minutes[k]
			mm.Admissions += m.Admissions
			mm.LagP50Ms, mm.LagP99Ms = max(mm.LagP50Ms, m.LagP50Ms), max(mm.LagP99Ms, m.LagP99Ms)
		}
		return nil
	})
	return out, err
}

// TriggerRow is one trigger of a project page: the trigger and its newest Run, if any.
type TriggerRow struct {
	Trigger
	LastRun *LastRun
}

// LastRun is a trigger's newest Run (by scheduled time).
type LastRun struct {
	RunID          uuid.UUID
	State          string
	ScheduledForMs int64
	QueuedAtMs     *int64
}

// TriggerPage asks for one page of a project's triggers by id, after After ("" for the first).
type TriggerPage struct {
	Project, After string
	Limit          int
}

// Validate names the field at fault.
func (p TriggerPage) Validate() error {
	if err := ValidateID(FieldProject, p.Project); err != nil {
		return err
	}
	if p.After != "" {
		if err := ValidateID(FieldTrigger, p.After); err != nil {
			return err
		}
	}
	if p.Limit < 1 || p.Limit > MaxConsolePage {
		return fieldErrf(FieldLimit, "%d is out of range: want 1 … %d", p.Limit, MaxConsolePage)
	}
	return nil
}

// ProjectTriggers reads one page of a project's triggers. An unknown project is ErrNotFound.
func (r *Reader) ProjectTriggers(ctx context.Context, p TriggerPage) (Project, []TriggerRow, error) {
	var project Project
	var out []TriggerRow
	if err := p.Validate(); err != nil {
		return project, nil, err
	}
	err := r.consoleSnapshot(ctx, func(q *db.Queries) error {
		projects, err := q.ConsoleProject(ctx, p.Project)
		if err != nil {
			return fmt.Errorf("read project %s: %w", p.Project, err)
		}
		if len(projects) == 0 {
			return fmt.Errorf("project %s: %w", p.Project, ErrNotFound)
		}
		x := projects[0]
		project = Project{ProjectID: x.ProjectID, State: x.State, Revision: x.Revision, CreatedAtMs: x.CreatedAtMs, UpdatedAtMs: x.UpdatedAtMs}
		rows, err := q.ConsoleProjectTriggers(ctx, db.ConsoleProjectTriggersParams{ProjectID: p.Project, AfterTrigger: p.After, MaxRows: int32(p.Limit)})
		if err != nil {
			return fmt.Errorf("read triggers of %s: %w", p.Project, err)
		}
		out = make([]TriggerRow, 0, len(rows))
		for _, t := range rows {
			tr := Trigger{
				ProjectID: t.ProjectID, ProjectState: t.ProjectState, TriggerID: t.TriggerID, TriggerRevision: t.TriggerRevision,
				CronSpec: t.CronSpec, TimeZone: t.Timezone, MisfirePolicy: schedule.MisfirePolicy(t.MisfirePolicy), MisfireGraceMs: t.MisfireGraceMs,
				Enabled: t.Enabled, TaskID: t.TaskID, TaskRevision: t.TaskRevision, ContentDigest: t.ContentDigest, RevisionCreatedMs: t.RevisionCreatedAtMs,
				NextFireAtMs: int8Ptr(t.NextFireAtMs), LastScheduledAtMs: int8Ptr(t.LastScheduledAtMs), StateVersion: t.StateVersion,
				ClaimOwner: textPtr(t.ClaimOwner), ClaimVersion: t.ClaimVersion, ClaimExpiresAtMs: int8Ptr(t.ClaimExpiresAtMs),
				UpdatedAtMs: t.UpdatedAtMs, NowMs: t.NowMs,
			}
			tr.nextFire()
			row := TriggerRow{Trigger: tr}
			if t.LastRunID != uuid.Nil {
				row.LastRun = &LastRun{RunID: t.LastRunID, State: t.LastRunState, ScheduledForMs: t.LastRunScheduledForMs.Int64,
					QueuedAtMs: int8Ptr(t.LastRunQueuedAtMs)}
			}
			out = append(out, row)
		}
		return nil
	})
	return project, out, err
}

// TriggerRevision is one revision of a trigger, with what changed from the one before it.
type TriggerRevision struct {
	Revision      int64
	CronSpec      string
	TimeZone      string
	MisfirePolicy string
	MisfireGrace  time.Duration
	Enabled       bool
	TaskID        string
	TaskRevision  int64
	ContentDigest string
	CreatedAtMs   int64
	// Changed names the fields that differ from the previous revision ("created" for the first;
	// empty when only the revision moved, or when the previous one is beyond the page).
	Changed []string
}

// MaxConsoleRevisions bounds the revisions TriggerHistory returns, newest first.
const MaxConsoleRevisions = 50

// TriggerHistory reads a trigger's newest revisions (at most MaxConsoleRevisions), newest first.
func (r *Reader) TriggerHistory(ctx context.Context, project, trigger string) ([]TriggerRevision, error) {
	if err := (TriggerShow{Project: project, Trigger: trigger, Upcoming: 1, Runs: 1}).Validate(); err != nil {
		return nil, err
	}
	var out []TriggerRevision
	err := r.consoleSnapshot(ctx, func(q *db.Queries) error {
		// one more than shown, so the oldest shown one can say what it changed
		rows, err := q.ConsoleTriggerRevisions(ctx, db.ConsoleTriggerRevisionsParams{ProjectID: project, TriggerID: trigger,
			MaxRows: MaxConsoleRevisions + 1})
		if err != nil {
			return fmt.Errorf("read revisions of %s/%s: %w", project, trigger, err)
		}
		revs := make([]TriggerRevision, 0, len(rows))
		for _, x := range rows {
			revs = append(revs, TriggerRevision{Revision: x.Revision, CronSpec: x.CronSpec, TimeZone: x.Timezone,
				MisfirePolicy: x.MisfirePolicy, MisfireGrace: time.Duration(x.MisfireGraceMs) * time.Millisecond, Enabled: x.Enabled, TaskID: x.TaskID, TaskRevision: x.TaskRevision,
				ContentDigest: x.ContentDigest, CreatedAtMs: x.CreatedAtMs})
		}
		for i := range revs {
			switch {
			case i+1 < len(revs):
				revs[i].Changed = revisionChanges(revs[i+1], revs[i])
			case revs[i].Revision == 1:
				revs[i].Changed = []string{"created"}
			}
		}
		out = revs[:min(len(revs), MaxConsoleRevisions)]
		return nil
	})
	return out, err
}

// revisionChanges names what differs between two revisions of a trigger, as "field: old → new".
func revisionChanges(prev, next TriggerRevision) []string {
	var out []string
	add := func(field string, a, b any) {
		if a != b {
			out = append(out, fmt.Sprintf("%s: %v → %v", field, a, b))
		}
	}
	add("cron", prev.CronSpec, next.CronSpec)
	add("timezone", prev.TimeZone, next.TimeZone)
	add("misfire", prev.MisfirePolicy, next.MisfirePolicy)
	add("misfire grace", prev.MisfireGrace, next.MisfireGrace)
	add("enabled", prev.Enabled, next.Enabled)
	add("task", fmt.Sprintf("%s@%d", prev.TaskID, prev.TaskRevision), fmt.Sprintf("%s@%d", next.TaskID, next.TaskRevision))
	return out
}

// RunPage asks for one page of a project's Runs, newest first. With Trigger, the page walks the
// trigger's occurrences (by scheduled time) and Before is a scheduled time; without, it walks the
// project's Runs by creation time and (Before, BeforeRun) is the keyset of the last Run seen.
// Zero Before starts at the newest. SinceMs (> 0) keeps the Runs at or after it.
type RunPage struct {
	Project, Trigger, State string
	Before                  int64
	BeforeRun               uuid.UUID
	SinceMs                 int64
	Limit                   int
}

// Validate names the field at fault.
func (p RunPage) Validate() error {
	if err := ValidateID(FieldProject, p.Project); err != nil {
		return err
	}
	if err := validateRunScope(p.Trigger, p.State); err != nil {
		return err
	}
	if p.Before < 0 || p.SinceMs < 0 {
		return fieldErrf(FieldSince, "want a time after 1970")
	}
	if p.Limit < 1 || p.Limit > MaxConsolePage {
		return fieldErrf(FieldLimit, "%d is out of range: want 1 … %d", p.Limit, MaxConsolePage)
	}
	return nil
}

// RunsPage reads one page of Runs.
func (r *Reader) RunsPage(ctx context.Context, p RunPage) ([]Run, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	before, beforeRun := p.Before, p.BeforeRun
	if before == 0 {
		before, beforeRun = math.MaxInt64, uuid.Max
	}
	var out []Run
	err := r.consoleSnapshot(ctx, func(q *db.Queries) error {
		if p.Trigger != "" {
			rows, err := q.ConsoleTriggerRunsPage(ctx, db.ConsoleTriggerRunsPageParams{ProjectID: p.Project, TriggerID: p.Trigger,
				BeforeScheduledMs: before, SinceMs: p.SinceMs, State: optText(p.State), MaxRows: int32(p.Limit)})
			if err != nil {
				return fmt.Errorf("read runs of %s/%s: %w", p.Project, p.Trigger, err)
			}
			out = make([]Run, 0, len(rows))
			for _, x := range rows {
				out = append(out, runOf(x.RunID, x.ProjectID, x.TaskID, x.TaskRevision, x.TriggerID, x.TriggerRevision, x.ScheduledForMs,
					x.IdempotencyKey, x.State, x.QueuedAtMs, x.CreatedAtMs, x.Attempts, x.Events))
			}
			return nil
		}
		rows, err := q.ConsoleRunsPage(ctx, db.ConsoleRunsPageParams{ProjectID: p.Project, BeforeCreatedMs: before, BeforeRunID: beforeRun,
			SinceMs: p.SinceMs, State: optText(p.State), MaxRows: int32(p.Limit)})
		if err != nil {
			return fmt.Errorf("read runs of %s: %w", p.Project, err)
		}
		out = make([]Run, 0, len(rows))
		for _, x := range rows {
			out = append(out, runOf(x.RunID, x.ProjectID, x.TaskID, x.TaskRevision, x.TriggerID, x.TriggerRevision, x.ScheduledForMs,
				x.IdempotencyKey, x.State, x.QueuedAtMs, x.CreatedAtMs, x.Attempts, x.Events))
		}
		return nil
	})
	return out, err
}

// runOf maps one row of either runs page to a Run.
func runOf(runID uuid.UUID, project, task string, taskRevision int64, trigger pgtype.Text, triggerRevision, scheduledFor pgtype.Int8,
	key, state string, queuedAt pgtype.Int8, createdAt, attempts, events int64) Run {
	return Run{RunID: runID, ProjectID: project, TaskID: task, TaskRevision: taskRevision, TriggerID: textPtr(trigger),
		TriggerRevision: int8Ptr(triggerRevision), ScheduledForMs: int8Ptr(scheduledFor), IdempotencyKey: key, State: state,
		QueuedAtMs: int8Ptr(queuedAt), CreatedAtMs: createdAt, Attempts: attempts, Events: events}
}
