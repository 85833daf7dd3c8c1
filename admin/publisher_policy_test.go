package admin_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/qlcontrol/controlcore/admin"
)

// A task's retry policy and selector are part of its revision and digest: the defaults keep the
// digest the task always had (the 4-argument digest), a changed policy is a new revision with
// another digest, an unchanged one writes nothing, and every revision's digest recomputes.
func TestTaskPolicyIsPartOfTheRevisionAndItsDigest(t *testing.T) {
	t.Parallel()
	f := newFixture(t) // task at revision 1, no policy
	ctx := context.Background()
	spec := []byte(`{"image":"example/job:1"}`)
	publish := func(ts admin.TaskSpec) admin.TaskPublished {
		t.Helper()
		ts.Project, ts.Task, ts.ExecutorSpec = "p", "task", spec
		pub, err := f.pub.PublishTask(ctx, ts)
		if err != nil {
			t.Fatal(err)
		}
		return pub
	}
	def := publish(admin.TaskSpec{})
	if !def.Unchanged || def.Revision != 1 || def.MaxAttempts != 1 || def.RetryBackoffMs != 0 || len(def.WorkerSelector) != 0 {
		t.Fatalf("re-publish without a policy: %+v; want unchanged revision 1 with the defaults", def)
	}
	if n := f.count(`SELECT count(*) FROM control_core.task_revisions kr JOIN control_core.execution_revisions e USING (execution_revision_id)
		WHERE kr.task_id = 'task' AND kr.revision = 1
		  AND kr.content_digest = control_core.task_digest(kr.task_id, kr.revision, e.execution_revision_id, e.digest)`); n != 1 {
		t.Errorf("revision 1's digest is not the 4-argument digest")
	}

	three := 3
	retry := publish(admin.TaskSpec{MaxAttempts: three})
	if retry.Unchanged || retry.Revision != 2 || retry.ContentDigest == def.ContentDigest || retry.MaxAttempts != 3 ||
		retry.RetryBackoffMs != admin.DefaultRetryBackoff.Milliseconds() {
		t.Fatalf("publish with max attempts 3: %+v; want revision 2, another digest, backoff 10 s", retry)
	}
	if again := publish(admin.TaskSpec{MaxAttempts: three}); !again.Unchanged || again.Revision != 2 || again.ContentDigest != retry.ContentDigest {
		t.Errorf("the same policy again: %+v; want unchanged revision 2", again)
	}
	backoff := 10 * time.Second // the default, given: the same content
	if same := publish(admin.TaskSpec{MaxAttempts: 3, RetryBackoff: &backoff}); !same.Unchanged {
		t.Errorf("the default backoff given explicitly: %+v; want unchanged", same)
	}
	gpu := publish(admin.TaskSpec{MaxAttempts: 3, WorkerLabels: map[string]string{"gpu": "true"}})
	if gpu.Unchanged || gpu.Revision != 3 || gpu.ContentDigest == retry.ContentDigest || gpu.WorkerSelector["gpu"] != "true" {
		t.Errorf("a selector added: %+v; want revision 3 with another digest", gpu)
	}
	// task list shows the head revision's policy
	tasks, err := admin.NewReader(f.d.Handle(t, "ql_admin")).Tasks(ctx, admin.TaskFilter{Project: "p"})
	if err != nil || len(tasks) != 1 || tasks[0].Revision != 3 || tasks[0].MaxAttempts != 3 || tasks[0].RetryBackoffMs != 10000 ||
		tasks[0].WorkerSelector["gpu"] != "true" {
		t.Errorf("task list %+v, %v; want revision 3 with its policy and selector", tasks, err)
	}
	back := publish(admin.TaskSpec{})
	if back.Unchanged || back.Revision != 4 || back.ContentDigest == def.ContentDigest {
		// the digest covers the revision number too: back to the defaults is a new revision
		t.Errorf("back to the defaults: %+v; want revision 4", back)
	}
	if n := f.count(`SELECT count(*) FROM control_core.task_revisions kr JOIN control_core.execution_revisions e USING (execution_revision_id)
		WHERE kr.task_id = 'task' AND kr.content_digest = control_core.task_digest(kr.task_id, kr.revision, e.execution_revision_id,
		      e.digest, kr.max_attempts, kr.retry_backoff_ms, kr.worker_selector)`); n != 4 {
		t.Errorf("%d of 4 revisions' digests recompute with the 7-argument digest", n)
	}
	if n := f.count(`SELECT count(*) FROM control_core.task_revisions WHERE task_id = 'task' AND revision = 3
		AND max_attempts = 3 AND retry_backoff_ms = 10000 AND worker_selector = '{"gpu":"true"}'`); n != 1 {
		t.Errorf("revision 3 does not hold its policy")
	}
}

// Out-of-bounds policies are refused before anything is sent, naming the field.
func TestTaskPolicyBounds(t *testing.T) {
	t.Parallel()
	pub := admin.NewPublisher(nil)
	d := func(x time.Duration) *time.Duration { return &x }
	many := map[string]string{}
	for i := range 17 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	for _, c := range []struct {
		name  string
		spec  admin.TaskSpec
		field string
	}{
		{"101 attempts", admin.TaskSpec{MaxAttempts: 101}, admin.FieldMaxAttempts},
		{"negative attempts", admin.TaskSpec{MaxAttempts: -1}, admin.FieldMaxAttempts},
		{"backoff above 24h", admin.TaskSpec{MaxAttempts: 2, RetryBackoff: d(25 * time.Hour)}, admin.FieldRetryBackoff},
		{"negative backoff", admin.TaskSpec{MaxAttempts: 2, RetryBackoff: d(-time.Second)}, admin.FieldRetryBackoff},
		{"sub-millisecond backoff", admin.TaskSpec{MaxAttempts: 2, RetryBackoff: d(time.Microsecond)}, admin.FieldRetryBackoff},
		{"backoff without retries", admin.TaskSpec{RetryBackoff: d(time.Second)}, admin.FieldRetryBackoff},
		{"17 labels", admin.TaskSpec{WorkerLabels: many}, admin.FieldWorkerLabel},
		{"bad label key", admin.TaskSpec{WorkerLabels: map[string]string{"GPU": "x"}}, admin.FieldWorkerLabel},
		{"empty label value", admin.TaskSpec{WorkerLabels: map[string]string{"gpu": ""}}, admin.FieldWorkerLabel},
	} {
		c.spec.Project, c.spec.Task, c.spec.ExecutorSpec = "p", "k", []byte(`{}`)
		var fe *admin.FieldError
		if _, err := pub.PublishTask(context.Background(), c.spec); !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: %v, want a FieldError naming %s", c.name, err, c.field)
		}
	}
	if _, err := admin.ParseWorkerLabels([]string{"gpu=true", "gpu=false"}); err == nil {
		t.Error("a label key given twice: accepted")
	}
}

// A schedules file's task policy is planned and applied like the publish's: a policy change is
// an update naming the fields, applying it writes one revision, and the file is then in sync.
func TestApplyTaskPolicy(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	text := `schema: qlsched.schedules/v1
projects:
  - id: p
    tasks:
      - id: task
        executor_spec: {image: "example/job:1"}
        max_attempts: 3
        retry_backoff: 30s
        worker_labels: {gpu: true}
`
	plan, err := f.pub.Apply(ctx, parse(t, "s.yaml", text), admin.ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var fields []string
	for _, it := range plan.Items {
		if it.Kind == admin.KindTask {
			if it.Action != admin.ActionUpdate || it.Revision != 2 {
				t.Errorf("task item %+v; want an update written as revision 2", it)
			}
			for _, c := range it.Changes {
				fields = append(fields, c.Field+"="+c.To)
			}
		}
	}
	if got := strings.Join(fields, " "); got != "max_attempts=3 retry_backoff=30s worker_labels=gpu=true" {
		t.Errorf("task changes %q; want the three policy fields, not the unchanged spec", got)
	}
	if n := f.count(`SELECT count(*) FROM control_core.task_revisions WHERE task_id = 'task' AND revision = 2
		AND max_attempts = 3 AND retry_backoff_ms = 30000 AND worker_selector = '{"gpu":"true"}'`); n != 1 {
		t.Error("revision 2 does not hold the file's policy")
	}
	if again, err := f.pub.Apply(ctx, parse(t, "s.yaml", text), admin.ApplyOptions{}); err != nil || !again.InSync || again.Applied {
		t.Errorf("apply again: in sync %v, applied %v, %v; want in sync", again.InSync, again.Applied, err)
	}
	for _, c := range []struct{ old, new, key string }{
		{"max_attempts: 3", "max_attempts: 0", "max_attempts"},
		{"max_attempts: 3", "max_attempts: 101", "max_attempts"},
		{"max_attempts: 3", "max_attempts: x", "max_attempts"},
		{"retry_backoff: 30s", "retry_backoff: 25h", "retry_backoff"},
		{"worker_labels: {gpu: true}", "worker_labels: [a]", "worker_labels"},
		{"worker_labels: {gpu: true}", "worker_labels: {GPU: x}", "worker_labels"},
	} {
		_, err := admin.ParseSchedules("bad.yaml", []byte(edit(t, text, c.old, c.new)))
		if err == nil || !strings.Contains(err.Error(), "tasks[task]."+c.key) {
			t.Errorf("%s: %v; want a fault naming %s", c.new, err, c.key)
		}
	}
}
