package dispatch_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/admin"
	"github.com/qlcontrol/controlcore/dispatch"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// unauditedFx is newFx without the loop audit at cleanup: these tests arrange, as the superuser,
// states the audit refuses by design.
func unauditedFx(t *testing.T) *fx {
	t.Helper()
	d := testpg.New(t)
	f := &fx{t: t, d: d, su: d.Pool(t, ""), pub: admin.NewPublisher(d.Handle(t, "ql_admin")),
		store: dispatch.NewStore(d.Handle(t, "ql_runtime"), testConfig)}
	f.project("p")
	return f
}

// The lease sweep never lets one lease hold back the others (a hostile review's M1): a lease whose
// ending fails (here a trigger the superuser planted refuses its Run's update) is reported by
// Attempt and left, and every other due lease of the same batch still expires; a lease whose
// Attempt is no longer running (FinishAttempts skips it for ever) is not handed to the sweep at
// all, so it cannot fill each batch ahead of one that can end.
func TestOneLeaseThatCannotEndHoldsBackNoOther(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		batch  int
		poison string // SQL run as the superuser; $1 is the poisoned Run, $2 its Attempt
		errHas bool   // the sweep reports the poisoned Attempt
	}{
		{name: "ending fails", batch: 128, errHas: true, poison: `
			CREATE FUNCTION public.refuse_run() RETURNS trigger LANGUAGE plpgsql AS
			  $f$ BEGIN RAISE EXCEPTION 'planted: this Run cannot change'; END $f$;
			CREATE TRIGGER refuse_run BEFORE UPDATE ON control_core.runs FOR EACH ROW
			  WHEN (OLD.run_id = '%RUN%') EXECUTE FUNCTION public.refuse_run()`},
		{name: "Attempt not running", batch: 1, poison: `
			SET session_replication_role = replica;
			UPDATE control_core.attempts SET state = 'failed', finished_at_ms = control_core.db_now_ms() WHERE attempt_id = '%ATTEMPT%';
			UPDATE control_core.run_leases SET expires_at_ms = expires_at_ms - 1000 WHERE attempt_id = '%ATTEMPT%';
			SET session_replication_role = origin`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := unauditedFx(t)
			f.policy("p", 3, 0, "{}")
			f.queue("p", 2)
			_, bad, _ := f.running(f.token("w1"))
			_, good, _ := f.running(f.token("w2"))
			f.expireLease(bad.AttemptID)
			f.expireLease(good.AttemptID)
			sql := strings.NewReplacer("%RUN%", bad.RunID.String(), "%ATTEMPT%", bad.AttemptID.String()).Replace(tc.poison)
			if _, err := f.su.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol); err != nil {
				t.Fatal(err)
			}
			n, err := f.store.ExpireLeases(ctx, tc.batch)
			if n != 1 {
				t.Errorf("one sweep expired %d leases, want 1 (the good one); err: %v", n, err)
			}
			if got := f.state(good.RunID); !strings.HasPrefix(got, "queued/claimed") {
				t.Errorf("the good Run is %s after the sweep, want queued/claimed/… (retried)", got)
			}
			if tc.errHas && (err == nil || !strings.Contains(err.Error(), bad.AttemptID.String())) {
				t.Errorf("the sweep's error does not name the Attempt it could not end: %v", err)
			}
			if !tc.errHas && err != nil {
				t.Errorf("the sweep failed: %v", err)
			}
		})
	}
}
