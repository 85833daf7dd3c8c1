package coordinator

import (
	"context"
	"strings"
	"testing"
)

// The claim an admit carries (pipeline.then) runs in a transaction of its own after the admit's
// COMMIT, with the claim's settings (no sort, generic plans, no JIT) and, behind a transaction
// pooler, the prologue's bounds; none of the admit's (join_collapse_limit 1) leaks into it.
func TestTheCarriedClaimRunsWithItsOwnSettingsOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const read = `SELECT txid_current()::text || '|' || current_setting('join_collapse_limit') || '|' || current_setting('enable_sort') || '|' ||
		current_setting('plan_cache_mode') || '|' || current_setting('jit') || '|' || current_setting('statement_timeout') || '|' ||
		current_setting('search_path') || '|' || current_setting('transaction_isolation')`
	for _, pooled := range []bool{false, true} {
		h := f.rt
		if pooled {
			h = f.openThrough("transaction", "")
		}
		ctx := context.Background()
		tx := newPipeline(h, serializableTx, admitSettings)
		tx.then = &pipeline{db: h, tx: implicitTx, settings: claimSettings, follows: true}
		second := tx.then.send(ctx, one(read, nil))
		var a, b string
		err1 := tx.QueryRow(ctx, read).Scan(&a)
		if cerr := tx.commit(); err1 == nil {
			err1 = cerr
		}
		err2 := second.QueryRow().Scan(&b)
		if cerr := tx.then.commit(); err2 == nil {
			err2 = cerr
		}
		t.Logf("pooled %v: admit %q, carried claim %q", pooled, a, b)
		if err1 != nil || err2 != nil {
			t.Fatalf("pooled %v: %v, %v", pooled, err1, err2)
		}
		ga, gb := strings.Split(a, "|"), strings.Split(b, "|")
		if len(ga) != 8 || len(gb) != 8 {
			t.Fatalf("pooled %v: %q, %q", pooled, a, b)
		}
		if ga[0] == gb[0] || ga[1] != "1" || ga[7] != "serializable" {
			t.Errorf("pooled %v: the admit ran with %q, the claim with %q; want two transactions, the admit's SERIALIZABLE with its join order", pooled, a, b)
		}
		if jcl, sort, pcm, jit, st, sp, iso := gb[1], gb[2], gb[3], gb[4], gb[5], gb[6], gb[7]; jcl == "1" || sort != "off" ||
			pcm != "force_generic_plan" || jit != "off" || iso != "read committed" || st == "0" || sp != "pg_catalog" {
			t.Errorf("pooled %v: carried claim ran with %q after the admit's %q", pooled, b, a)
		}
	}
}
