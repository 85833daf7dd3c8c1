package roles_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// Worker tokens (pg-0022) are the admin role's to create and revoke, and only that: the database
// stamps the times, a revocation is forever, name and hash never change, each write leaves its
// audit row without the hash, and the runtime role only reads them.
func TestWorkerTokensAreCreatedAndRevokedOnlyAsTheGuardAllows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testpg.New(t)
	admin, runtime := d.Pool(t, "ql_admin"), d.Pool(t, "ql_runtime")
	var id string
	var created int64
	if err := admin.QueryRow(ctx, `INSERT INTO control_core.worker_tokens (worker_token_id, name, token_hash, created_at_ms, revoked_at_ms)
		VALUES (gen_random_uuid(), 'w1', repeat('a', 64), 1, 2) RETURNING worker_token_id::text, created_at_ms`).Scan(&id, &created); err != nil {
		t.Fatalf("create as the admin role: %v", err)
	}
	if created <= 1 || count(t, admin, `SELECT count(*) FROM control_core.worker_tokens WHERE revoked_at_ms IS NULL`) != 1 {
		t.Errorf("created_at_ms %d and revoked_at_ms given by the client were kept; want the database's time and a live token", created)
	}
	refused := func(what, sql string) {
		t.Helper()
		_, err := admin.Exec(ctx, sql, id)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.IntegrityConstraintViolation {
			t.Errorf("%s: %v, want integrity_constraint_violation", what, err)
		}
	}
	refused("rename", `UPDATE control_core.worker_tokens SET name = 'w2' WHERE worker_token_id = $1`)
	refused("new hash", `UPDATE control_core.worker_tokens SET token_hash = repeat('b', 64) WHERE worker_token_id = $1`)
	refused("an update that is no revocation", `UPDATE control_core.worker_tokens SET revoked_at_ms = NULL WHERE worker_token_id = $1`)
	if _, err := admin.Exec(ctx, `UPDATE control_core.worker_tokens SET revoked_at_ms = 1 WHERE worker_token_id = $1`, id); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if count(t, admin, `SELECT count(*) FROM control_core.worker_tokens WHERE revoked_at_ms >= created_at_ms`) != 1 {
		t.Error("the revocation time is not the database's")
	}
	refused("revoke again", `UPDATE control_core.worker_tokens SET revoked_at_ms = 5 WHERE worker_token_id = $1`)
	refused("un-revoke", `UPDATE control_core.worker_tokens SET revoked_at_ms = NULL WHERE worker_token_id = $1`)

	if n := count(t, admin, `SELECT count(*) FROM control_core.admin_audit_log WHERE project_id IS NULL AND subject = 'w1'
		AND detail->>'id' = $1 AND action IN ('worker_token.create', 'worker_token.revoke')`, id); n != 2 {
		t.Errorf("%d audit rows for the token's create and revoke, want 2", n)
	}
	if n := count(t, admin, `SELECT count(*) FROM control_core.admin_audit_log WHERE detail::text LIKE '%aaaaaaaa%'`); n != 0 {
		t.Error("the token hash is in the audit log")
	}

	if count(t, runtime, `SELECT count(*) FROM control_core.worker_tokens`) != 1 {
		t.Error("the runtime role cannot read the tokens")
	}
	_, err := runtime.Exec(ctx, `INSERT INTO control_core.worker_tokens (worker_token_id, name, token_hash) VALUES (gen_random_uuid(), 'x', repeat('c', 64))`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.InsufficientPrivilege {
		t.Errorf("insert as the runtime role: %v, want permission denied", err)
	}
}

func count(t *testing.T, pool interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}
