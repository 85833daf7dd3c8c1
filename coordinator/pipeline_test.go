package coordinator

import (
	"context"
	"errors"
	"testing"

	"github.com/qlcontrol/controlcore/db"
)

// The store's pipeline is a whole db.DBTX: a generated query that is not a batch (QueryRow here)
// runs in the pipeline's transaction, after the planner settings, as one that is; and one
// pipeline is one transaction, so a second statement is refused rather than run outside it.
func TestPipelineRunsEveryKindOfQueryInItsTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	for _, tx := range []txKind{implicitTx, serializableTx} {
		p := newPipeline(f.rt, tx, admitSettings)
		var mode, collapse string
		err := p.QueryRow(ctx, "SELECT current_setting('plan_cache_mode'), current_setting('join_collapse_limit')").Scan(&mode, &collapse)
		if cerr := p.commit(); err == nil {
			err = cerr
		}
		if err != nil || mode != "force_generic_plan" || collapse != "1" {
			t.Errorf("tx %d: plan_cache_mode %q, join_collapse_limit %q (%v); want the pipeline's settings in force", tx, mode, collapse, err)
		}
		if _, err := p.Exec(ctx, "SELECT 1"); !errors.Is(err, errPipelineSent) {
			t.Errorf("tx %d: a second statement on a sent pipeline: %v; want errPipelineSent", tx, err)
			_ = p.results.pr.Commit() // release the connection it took
		}
		p = newPipeline(f.rt, tx, hotSettings)
		if _, err := db.New(p).NextDueIn(ctx); err != nil {
			t.Errorf("tx %d: a generated single-row query through the pipeline: %v", tx, err)
		}
		if err := p.commit(); err != nil {
			t.Errorf("tx %d: commit after a generated single-row query: %v", tx, err)
		}
	}
}
