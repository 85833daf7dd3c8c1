package coordinator

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/schedule"
)

// The publisher lives in package admin, which imports this package (for the cron parser and
// MisfirePolicy), so these internal tests cannot import it. testPublisher writes what the tests
// arrange through the same sqlc queries, in the same order and in one transaction under the
// Project lock, without admin's input checks and audit rows; admin's own tests cover those.
// Once the cron decision has a package of its own, the fixture can use admin.Publisher.
type testPublisher struct{ pool *pgxpool.Pool }

func newTestPublisher(pool *pgxpool.Pool) *testPublisher { return &testPublisher{pool: pool} }

// TriggerSpec is a cron trigger the tests publish.
type TriggerSpec struct {
	Project, Trigger, Task string
	Cron, TimeZone         string
	Misfire                schedule.MisfirePolicy
	Enabled                bool
}

// TriggerPublished is what publishing a trigger wrote.
type TriggerPublished struct {
	Revision, TaskRevision     int64
	StateVersion, ClaimVersion int64
	ContentDigest              string
}

func (p *testPublisher) CreateProject(ctx context.Context, project string) error {
	_, err := db.New(p.pool).CreateProject(ctx, project)
	return err
}

func (p *testPublisher) inProject(ctx context.Context, project string, fn func(q *db.Queries) error) error {
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		if _, err := q.LockProject(ctx, db.LockProjectParams{ProjectID: project, Reason: "test"}); err != nil {
			return fmt.Errorf("lock project %s: %w", project, err)
		}
		return fn(q)
	})
}

func (p *testPublisher) PublishTask(ctx context.Context, project, task string, spec []byte) (int64, error) {
	var rev int64
	err := p.inProject(ctx, project, func(q *db.Queries) error {
		exec, err := q.UpsertExecutionRevision(ctx, db.UpsertExecutionRevisionParams{ProjectID: project, Spec: spec})
		if err != nil {
			return err
		}
		head, err := q.BumpTaskHead(ctx, db.BumpTaskHeadParams{ProjectID: project, TaskID: task})
		if err != nil {
			return err
		}
		_, err = q.InsertTaskRevision(ctx, db.InsertTaskRevisionParams{ProjectID: project, TaskID: task, Revision: head, ExecutionRevisionID: exec.ExecutionRevisionID})
		rev = head
		return err
	})
	return rev, err
}

func (p *testPublisher) PublishTrigger(ctx context.Context, t TriggerSpec) (TriggerPublished, error) {
	if _, err := schedule.ParseSchedule(t.Cron, t.TimeZone); err != nil {
		return TriggerPublished{}, err
	}
	var out TriggerPublished
	err := p.inProject(ctx, t.Project, func(q *db.Queries) error {
		taskRev, err := q.GetTaskHead(ctx, db.GetTaskHeadParams{ProjectID: t.Project, TaskID: t.Task})
		if err != nil {
			return fmt.Errorf("task %s/%s: %w", t.Project, t.Task, err)
		}
		head, err := q.BumpTriggerHead(ctx, db.BumpTriggerHeadParams{ProjectID: t.Project, TriggerID: t.Trigger})
		if err != nil {
			return err
		}
		rev, err := q.InsertTriggerRevision(ctx, db.InsertTriggerRevisionParams{
			ProjectID: t.Project, TriggerID: t.Trigger, Revision: head, CronSpec: t.Cron, Timezone: t.TimeZone,
			MisfirePolicy: string(t.Misfire), Enabled: t.Enabled, TaskID: t.Task, TaskRevision: taskRev,
		})
		if err != nil {
			return err
		}
		sched, err := q.UpsertSchedule(ctx, db.UpsertScheduleParams{ProjectID: t.Project, TriggerID: t.Trigger, TriggerRevision: head})
		if err != nil {
			return err
		}
		out = TriggerPublished{Revision: head, TaskRevision: taskRev, StateVersion: sched.StateVersion, ClaimVersion: sched.ClaimVersion, ContentDigest: rev.ContentDigest}
		return nil
	})
	return out, err
}
