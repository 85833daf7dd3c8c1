package readiness_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
	"github.com/qlcontrol/controlcore/readiness"
)

func readBuiltins(t *testing.T, d *testpg.DB) []readiness.Builtin {
	t.Helper()
	ctx := context.Background()
	var out []readiness.Builtin
	err := pgx.BeginTxFunc(ctx, d.Pool(t, ""), pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL search_path = pg_catalog"); err != nil {
			return err
		}
		var err error
		out, err = readiness.ReadBuiltins(ctx, tx)
		return err
	})
	if err != nil {
		t.Fatalf("read built-ins: %v", err)
	}
	return out
}

// The committed built-ins' contract holds exactly what a fresh server of the test's major has.
// CI runs it on every major; -update rewrites that major's lines only.
func TestBuiltinContractMatchesAFreshServer(t *testing.T) {
	t.Parallel()
	d := testpg.New(t)
	major := d.Server.Major()
	fresh := readBuiltins(t, d)
	if *update {
		old, err := os.ReadFile("builtins_contract.txt")
		if err != nil {
			t.Fatal(err)
		}
		text, err := readiness.UpdateBuiltins(old, major, fresh)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile("builtins_contract.txt", text, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := readiness.ContractBuiltins(major)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) == 0 {
		t.Fatalf("builtins_contract.txt has nothing for PostgreSQL %d; run\n"+
			"  QL_PG_BIN=$(scripts/pg-bin.sh %d) go test ./readiness -run TestBuiltinContractMatchesAFreshServer -update", major, major)
	}
	for _, d := range readiness.CompareBuiltins(want, fresh) {
		t.Errorf("%s: %s", d.Object, d.Message)
	}
}
