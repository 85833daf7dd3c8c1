package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
	"github.com/qlcontrol/controlcore/schedule"
)

// Reader reads what the scheduler holds, each report in one snapshot. Any role with SELECT on
// control_core may use it (the admin and the runtime role); it writes nothing.
type Reader struct{ db *dbconn.DB }

// NewReader wraps a handle.
func NewReader(h *dbconn.DB) *Reader { return &Reader{db: h} }

// snapshot runs fn in one REPEATABLE READ READ ONLY transaction: every query fn sends sees the
// same committed state, so the parts of one report agree with each other (a Run counted in one
// part is listed in the other). Each statement still observes its own database time
// (control_core.db_now_ms() is the statement's timestamp).
func (r *Reader) snapshot(ctx context.Context, fn func(q *db.Queries) error) error {
	return r.db.InTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly},
		func(tx pgx.Tx) error {
			q := db.New(tx)
			// no JIT, as in the console's snapshot: the reads are bounded walks, but a LATERAL per
			// project multiplies the estimates past the JIT thresholds, and compiling costs more
			// than the walk (issue 37)
			if err := q.ConsoleNoJIT(ctx); err != nil {
				return fmt.Errorf("turn JIT off: %w", err)
			}
			return fn(q)
		})
}

// Trigger is a trigger's head revision with its schedule row. Nil pointers are what the row does
// not hold yet: no cursor before the first claim, no claim.
//
// NextFireMs is when the trigger fires next as far as the database says now: the cursor once a
// replica initialised the row; before that, a preview (NextFirePreview true), the first
// occurrence of the cron spec in its zone after the database's time of the read, which is what
// the first claim will set. Nil when nothing will fire: the trigger is disabled, its project is
// not active, or the spec does not parse here (ScheduleError says why).
type Trigger struct {
	ProjectID         string                 `json:"project_id"`
	ProjectState      string                 `json:"project_state"`
	TriggerID         string                 `json:"trigger_id"`
	TriggerRevision   int64                  `json:"trigger_revision"`
	CronSpec          string                 `json:"cron_spec"`
	TimeZone          string                 `json:"timezone"`
	MisfirePolicy     schedule.MisfirePolicy `json:"misfire_policy"`
	MisfireGraceMs    int64                  `json:"misfire_grace_ms"`
	Enabled           bool                   `json:"enabled"`
	TaskID            string                 `json:"task_id"`
	TaskRevision      int64                  `json:"task_revision"`
	ContentDigest     string                 `json:"content_digest"`
	RevisionCreatedMs int64                  `json:"revision_created_at_ms"`
	NextFireAtMs      *int64                 `json:"next_fire_at_ms"` // the stored cursor
	NextFireMs        *int64                 `json:"next_fire_ms"`
	NextFirePreview   bool                   `json:"next_fire_preview"`
	ScheduleError     string                 `json:"schedule_error,omitempty"`
	LastScheduledAtMs *int64                 `json:"last_scheduled_at_ms"`
	StateVersion      int64                  `json:"state_version"`
	ClaimOwner        *string                `json:"claim_owner"`
	ClaimVersion      int64                  `json:"claim_version"`
	ClaimExpiresAtMs  *int64                 `json:"claim_expires_at_ms"`
	UpdatedAtMs       int64                  `json:"updated_at_ms"`
	NowMs             int64                  `json:"now_ms"` // the database's time of the read
}

// ClaimLive reports whether the row carries a claim that has not expired by the read's time.
func (t Trigger) ClaimLive() bool {
	return t.ClaimOwner != nil && t.ClaimExpiresAtMs != nil && *t.ClaimExpiresAtMs > t.NowMs
}

// DefaultListLimit is how many rows a page of trigger list or task list holds when no limit is
// given; MaxListLimit bounds the limit. A page is one range of a primary key, so its cost is its
// size, whatever the table holds.
const (
	DefaultListLimit = 100
	MaxListLimit     = 10000
)

// TriggerFilter selects one page of triggers in (project, trigger) order; a zero Project or
// Trigger selects all. After ("PROJECT/TRIGGER", as a page's Next gives it) starts the page after
// that trigger; Limit (1 … MaxListLimit) bounds it, 0 meaning DefaultListLimit.
type TriggerFilter struct {
	Project, Trigger string
	After            string
	Limit            int
}

// Validate refuses a filter that could never match a stored row, a malformed After and a limit
// out of bounds.
func (f TriggerFilter) Validate() error {
	for _, id := range []struct{ field, id string }{{FieldProject, f.Project}, {FieldTrigger, f.Trigger}} {
		if id.id != "" {
			if err := ValidateID(id.field, id.id); err != nil {
				return err
			}
		}
	}
	if _, err := parseAfter(f.After, f.Project, FieldTrigger); err != nil {
		return err
	}
	return validateListLimit(f.Limit)
}

// ListKey is a keyset position of a paged list: the (project, id) of the last row of a page.
type ListKey struct{ Project, ID string }

// String is the form a --after flag takes: "PROJECT/ID" ("" for the start).
func (k ListKey) String() string {
	if k == (ListKey{}) {
		return ""
	}
	return k.Project + "/" + k.ID
}

// parseAfter reads "PROJECT/ID" ("" is the start). With a project filter the key must lie in
// that project: a key of another project would silently give an empty or a wrong page.
func parseAfter(after, project, idField string) (ListKey, error) {
	if after == "" {
		return ListKey{}, nil
	}
	p, id, ok := strings.Cut(after, "/")
	if !ok {
		return ListKey{}, fieldErrf(FieldAfter, "%q: want PROJECT/%s, the key the previous page printed", after, strings.ToUpper(idField))
	}
	if err := ValidateID(FieldProject, p); err != nil {
		return ListKey{}, fieldErrf(FieldAfter, "%q: %v", after, errors.Unwrap(err))
	}
	if err := ValidateID(idField, id); err != nil {
		return ListKey{}, fieldErrf(FieldAfter, "%q: %v", after, errors.Unwrap(err))
	}
	if project != "" && p != project {
		return ListKey{}, fieldErrf(FieldAfter, "%q lies in project %s, not in --project %s", after, p, project)
	}
	return ListKey{Project: p, ID: id}, nil
}

func validateListLimit(limit int) error {
	if limit < 0 || limit > MaxListLimit {
		return fieldErrf(FieldLimit, "%d is out of range: want 1 … %d", limit, MaxListLimit)
	}
	return nil
}

func listLimit(limit int) int {
	if limit == 0 {
		return DefaultListLimit
	}
	return limit
}

// TriggerList is one page of triggers. Next is set when more triggers follow the page: pass it
// as TriggerFilter.After (--after) for the next page.
type TriggerList struct {
	Triggers []Trigger
	Next     string
}

// TriggerPage reads one page of triggers by project and id.
func (r *Reader) TriggerPage(ctx context.Context, f TriggerFilter) (TriggerList, error) {
	if err := f.Validate(); err != nil {
		return TriggerList{}, err
	}
	var out TriggerList
	err := r.snapshot(ctx, func(q *db.Queries) (err error) {
		out, err = readTriggers(ctx, q, f)
		return err
	})
	return out, err
}

// Triggers reads the first page of triggers (TriggerPage without its Next).
func (r *Reader) Triggers(ctx context.Context, f TriggerFilter) ([]Trigger, error) {
	page, err := r.TriggerPage(ctx, f)
	return page.Triggers, err
}

// readTriggers reads one row more than the page holds: its presence is the "more" hint.
func readTriggers(ctx context.Context, q *db.Queries, f TriggerFilter) (TriggerList, error) {
	after, err := parseAfter(f.After, f.Project, FieldTrigger)
	if err != nil {
		return TriggerList{}, err
	}
	limit := listLimit(f.Limit)
	rows, err := q.ListTriggers(ctx, db.ListTriggersParams{ProjectID: optText(f.Project), TriggerID: optText(f.Trigger),
		AfterProject: after.Project, AfterTrigger: after.ID, MaxRows: int32(limit + 1)})
	if err != nil {
		return TriggerList{}, fmt.Errorf("read triggers: %w", err)
	}
	var next string
	if len(rows) > limit {
		rows = rows[:limit]
		next = ListKey{rows[limit-1].ProjectID, rows[limit-1].TriggerID}.String()
	}
	out := make([]Trigger, 0, len(rows))
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
		out = append(out, tr)
	}
	return TriggerList{Triggers: out, Next: next}, nil
}

// nextFire sets NextFireMs: the cursor, or the preview from the spec and the read's time.
func (t *Trigger) nextFire() {
	if !t.Enabled || t.ProjectState != "active" {
		return
	}
	if t.NextFireAtMs != nil {
		t.NextFireMs = t.NextFireAtMs
		return
	}
	sched, err := schedule.ParseSchedule(t.CronSpec, t.TimeZone)
	if err != nil {
		t.ScheduleError = err.Error()
		return
	}
	if next := sched.Next(t.NowMs); next != schedule.NoOccurrence {
		t.NextFireMs, t.NextFirePreview = &next, true
	}
}

// Run is an admitted Run with the number of its Attempts and Events. The trigger fields are nil
// for a Run no trigger admitted.
type Run struct {
	RunID           uuid.UUID `json:"run_id"`
	ProjectID       string    `json:"project_id"`
	TaskID          string    `json:"task_id"`
	TaskRevision    int64     `json:"task_revision"`
	TriggerID       *string   `json:"trigger_id"`
	TriggerRevision *int64    `json:"trigger_revision"`
	ScheduledForMs  *int64    `json:"scheduled_for_ms"`
	IdempotencyKey  string    `json:"idempotency_key"`
	State           string    `json:"state"`
	QueuedAtMs      *int64    `json:"queued_at_ms"`
	CreatedAtMs     int64     `json:"created_at_ms"`
	Attempts        int64     `json:"attempts"`
	Events          int64     `json:"events"`
}

// LagMs is the admission lag, queued minus scheduled time (both the database's); ok is false when
// the Run lacks either.
func (r Run) LagMs() (lag int64, ok bool) { return admissionLag(r.ScheduledForMs, r.QueuedAtMs) }

// admissionLag is the one definition of a Run's admission lag: queued minus scheduled time.
func admissionLag(scheduledForMs, queuedAtMs *int64) (int64, bool) {
	if scheduledForMs == nil || queuedAtMs == nil {
		return 0, false
	}
	return *queuedAtMs - *scheduledForMs, true
}

// MaxRunsLimit bounds RunFilter.Limit.
const MaxRunsLimit = 10000

// RunStates are the states a Run can be in: the CHECK of runs.state (0006).
var RunStates = []string{"queued", "dispatching", "running", "succeeded", "failed", "cancelled"}

// RunFilter selects Runs; a zero Project, Trigger or State selects all, Limit (1 …
// MaxRunsLimit) bounds how many, newest first. SinceMs (milliseconds since the epoch) keeps the
// Runs admitted at or after it; Within (> 0) keeps those admitted within that long before the
// database's time; at most one of the two.
type RunFilter struct {
	Project, Trigger string
	State            string
	SinceMs          int64
	Within           time.Duration
	Limit            int
}

// Validate refuses a filter that could never match a stored row, and a limit out of bounds.
func (f RunFilter) Validate() error {
	if f.Project != "" {
		if err := ValidateID(FieldProject, f.Project); err != nil {
			return err
		}
	}
	if err := validateRunScope(f.Trigger, f.State); err != nil {
		return err
	}
	if f.SinceMs < 0 || f.Within < 0 || (f.SinceMs != 0 && f.Within != 0) {
		return fieldErrf(FieldSince, "want one time or one positive duration")
	}
	if f.Limit < 1 || f.Limit > MaxRunsLimit {
		return fieldErrf(FieldLimit, "%d is out of range: want 1 … %d", f.Limit, MaxRunsLimit)
	}
	return nil
}

// validateRunScope checks the optional trigger id and Run state that both Run listings filter by.
func validateRunScope(trigger, state string) error {
	if trigger != "" {
		if err := ValidateID(FieldTrigger, trigger); err != nil {
			return err
		}
	}
	if state != "" && !slices.Contains(RunStates, state) {
		return fieldErrf(FieldState, "%q is not a Run state: want one of %s", state, strings.Join(RunStates, ", "))
	}
	return nil
}

// Runs lists the newest Runs.
func (r *Reader) Runs(ctx context.Context, f RunFilter) ([]Run, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	var out []Run
	err := r.snapshot(ctx, func(q *db.Queries) (err error) {
		out, err = readRuns(ctx, q, f)
		return err
	})
	return out, err
}

// TriggerRunsWalk bounds how many of a trigger's newest occurrences (per project) a Run listing
// filtered by trigger and by state or time looks at: the filters are applied to that walk, so a
// filter that matches nothing costs at most this many Runs.
const TriggerRunsWalk = 10000

// readRuns reads a page of Runs: newest admission first, or with a trigger newest occurrence
// first (sql/queries/publish.sql says why each is an index range).
func readRuns(ctx context.Context, q *db.Queries, f RunFilter) ([]Run, error) {
	since := pgtype.Int8{Int64: f.SinceMs, Valid: f.SinceMs > 0}
	within := pgtype.Int8{Int64: f.Within.Milliseconds(), Valid: f.Within > 0}
	var out []Run
	if f.Trigger != "" {
		rows, err := q.ListTriggerRuns(ctx, db.ListTriggerRunsParams{ProjectID: optText(f.Project), TriggerID: f.Trigger,
			State: optText(f.State), SinceMs: since, WithinMs: within, Walk: TriggerRunsWalk, MaxRows: int32(f.Limit)})
		if err != nil {
			return nil, fmt.Errorf("read runs of trigger %s: %w", f.Trigger, err)
		}
		out = make([]Run, 0, len(rows))
		for _, x := range rows {
			out = append(out, runOf(x.RunID, x.ProjectID, x.TaskID, x.TaskRevision, x.TriggerID, x.TriggerRevision, x.ScheduledForMs,
				x.IdempotencyKey, x.State, x.QueuedAtMs, x.CreatedAtMs, x.Attempts, x.Events))
		}
		return out, nil
	}
	rows, err := q.ListRuns(ctx, db.ListRunsParams{ProjectID: optText(f.Project), State: optText(f.State),
		SinceMs: since, WithinMs: within, MaxRows: int32(f.Limit)})
	if err != nil {
		return nil, fmt.Errorf("read runs: %w", err)
	}
	out = make([]Run, 0, len(rows))
	for _, x := range rows {
		out = append(out, runOf(x.RunID, x.ProjectID, x.TaskID, x.TaskRevision, x.TriggerID, x.TriggerRevision, x.ScheduledForMs,
			x.IdempotencyKey, x.State, x.QueuedAtMs, x.CreatedAtMs, x.Attempts, x.Events))
	}
	return out, nil
}

// MaxLastAdmits bounds the admissions a ProjectStatus lists: the newest per trigger, newest first.
const MaxLastAdmits = 5

// LastAdmitsWalk is how many of a project's newest admitted Runs status reads to find them.
const LastAdmitsWalk = 200

// Status is what the scheduler is doing, per project and per replica, read in one snapshot.
type Status struct {
	Projects []ProjectStatus `json:"projects"`
	// LiveClaimsByOwner is every replica holding live claims, across projects, by owner.
	LiveClaimsByOwner []ReplicaClaims `json:"live_claims_by_owner"`
}

// ProjectStatus is one project's triggers, backlog, live claims and last admissions. Backlog is
// as sql/queries/status.sql defines it: the schedule rows a claim would take now (the
// qlsched_backlog_schedules gauge has the same definition, database-wide). Triggers and
// Enabled stop at CountCap (CountsPartial); Backlog counts among the first CountCap rows of the
// due range, oldest first (BacklogPartial: the walk reached that cap, so Backlog is a lower bound;
// an OldestOverdueMs it found is the oldest, but 0 then does not mean none). The live claims are
// exact. Times are the database's milliseconds; 0 in OldestOverdueMs and LastAdmitMs means none
// (found).
type ProjectStatus struct {
	ProjectID         string        `json:"project_id"`
	State             string        `json:"state"`
	Triggers          int64         `json:"triggers"`
	Enabled           int64         `json:"enabled"`
	CountsPartial     bool          `json:"counts_partial"`
	Backlog           int64         `json:"backlog"`
	BacklogPartial    bool          `json:"backlog_partial"`
	OldestOverdueMs   int64         `json:"oldest_overdue_ms"`
	LiveClaims        int64         `json:"live_claims"`
	LastAdmitMs       int64         `json:"last_admit_ms"`
	NowMs             int64         `json:"now_ms"`
	LiveClaimsByOwner []OwnerClaims `json:"live_claims_by_owner"`
	LastAdmits        []Admit       `json:"last_admits"` // at most MaxLastAdmits
}

// OwnerClaims is how many live claims one owner holds in a project.
type OwnerClaims struct {
	Owner  string `json:"owner"`
	Claims int64  `json:"claims"`
}

// ReplicaClaims is how many live claims one owner holds across projects, and how soon the first
// of them expires.
type ReplicaClaims struct {
	Owner             string `json:"owner"`
	Claims            int64  `json:"claims"`
	SoonestExpiryInMs int64  `json:"soonest_expiry_in_ms"`
}

// Admit is the newest admitted Run of one trigger.
type Admit struct {
	TriggerID       string    `json:"trigger_id"`
	TriggerRevision int64     `json:"trigger_revision"`
	ScheduledForMs  int64     `json:"scheduled_for_ms"`
	QueuedAtMs      int64     `json:"queued_at_ms"`
	RunID           uuid.UUID `json:"run_id"`
}

// Status reads the status of every project and the live claims by owner.
func (r *Reader) Status(ctx context.Context) (Status, error) {
	var res Status
	err := r.snapshot(ctx, func(q *db.Queries) error {
		projects, err := readProjectFigures(ctx, q)
		if err != nil {
			return err
		}
		claims, err := q.LiveClaimsByProjectOwner(ctx)
		if err != nil {
			return fmt.Errorf("read live claims: %w", err)
		}
		admits, err := q.LastAdmits(ctx, db.LastAdmitsParams{Walk: LastAdmitsWalk, MaxAdmits: MaxLastAdmits})
		if err != nil {
			return fmt.Errorf("read last admissions: %w", err)
		}
		res = Status{Projects: make([]ProjectStatus, 0, len(projects)), LiveClaimsByOwner: replicaClaims(claims)}
		index := map[string]int{}
		for i, p := range projects {
			index[p.ProjectID] = i
			ps := ProjectStatus{
				ProjectID: p.ProjectID, State: p.State, Triggers: p.Triggers, Enabled: p.Enabled, CountsPartial: p.countsPartial(),
				Backlog: p.Backlog, BacklogPartial: p.DuePartial, OldestOverdueMs: p.OldestOverdueMs, NowMs: p.NowMs,
				LiveClaimsByOwner: []OwnerClaims{}, LastAdmits: []Admit{}, // empty, not nil: JSON says "none" without a special case
			}
			res.Projects = append(res.Projects, ps)
		}
		for _, c := range claims { // by project, then owner
			if i, ok := index[c.ProjectID]; ok {
				res.Projects[i].LiveClaims += c.Claims
				res.Projects[i].LiveClaimsByOwner = append(res.Projects[i].LiveClaimsByOwner, OwnerClaims{c.Owner, c.Claims})
			}
		}
		for _, a := range admits { // newest first within a project: the first is its last admission
			if i, ok := index[a.ProjectID]; ok && len(res.Projects[i].LastAdmits) < MaxLastAdmits {
				if len(res.Projects[i].LastAdmits) == 0 {
					res.Projects[i].LastAdmitMs = a.QueuedAtMs
				}
				res.Projects[i].LastAdmits = append(res.Projects[i].LastAdmits,
					Admit{a.TriggerID, a.TriggerRevision, a.ScheduledForMs, a.QueuedAtMs, a.RunID})
			}
		}
		return nil
	})
	return res, err
}

// The mapping between sqlc's nullable values and this package's pointers: here and nowhere else.

func optText(s string) pgtype.Text { return pgtype.Text{String: s, Valid: s != ""} }

func int8Ptr(v pgtype.Int8) *int64 {
	if !v.Valid {
		return nil
	}
	return &v.Int64
}

func textPtr(v pgtype.Text) *string {
	if !v.Valid {
		return nil
	}
	return &v.String
}
