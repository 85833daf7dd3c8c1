package migrate_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/checksums"
	"github.com/qlcontrol/controlcore/internal/app/migrate"
	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// TestAcceptOfAReleasedTextSaysThereIsNothingToAccept: on a stop-43 database verify and status
// call pg-0020, pg-0021 and pg-0023 released_text ("nothing to do"); accept must agree, not
// tell the operator the file's statements were edited and must be restored, and must write
// nothing.
func TestAcceptOfAReleasedTextSaysThereIsNothingToAccept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.NewEmpty(t)
	if _, err := open(t, d, "", stop43Stream(t)).Up(ctx, 0); err != nil {
		t.Fatalf("up with the stop-43 texts: %v", err)
	}
	su := d.Pool(t, "")
	r := open(t, d, "", nil)
	for _, rel := range checksums.ReleasedTexts {
		_, err := r.Accept(ctx, rel.Version, "try to accept a released text")
		var refused *migrate.AcceptError
		if !errors.As(err, &refused) {
			t.Fatalf("accept version %d: %v, want an *AcceptError", rel.Version, err)
		}
		if !strings.Contains(err.Error(), "released text") || strings.Contains(err.Error(), "changed (statements)") {
			t.Errorf("accept version %d: %v, want it named a released text, not a statement edit", rel.Version, err)
		}
		if n := count(t, su, `SELECT count(*) FROM control_core.migration_ledger WHERE version = $1 AND sha256 = $2`, rel.Version, rel.SHA256); n != 1 {
			t.Errorf("accept version %d moved the ledger row", rel.Version)
		}
	}
	if n := count(t, su, `SELECT count(*) FROM control_core.migration_acceptances`); n != 0 {
		t.Errorf("accept recorded %d acceptances of released texts", n)
	}
}
