package testpg

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/qlcontrol/controlcore/roles"
)

// ReadAudit reads the privilege audit of the database behind url (connected as whichever role
// url names) the way `qlmigrate verify` does, with opts; the test fails if it cannot.
func ReadAudit(t testing.TB, url string, names roles.Names, opts roles.AuditOptions) *roles.Audit {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	a, err := roles.ReadAudit(ctx, conn, names, opts)
	if err != nil {
		t.Fatalf("read the audit: %v", err)
	}
	return a
}
