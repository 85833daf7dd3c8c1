package chaos

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Execer is what InstallInsertLog and InsertAttempts need of a connection or pool.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// InstallInsertLog counts the rows proposed for insertion into table that pass where (an SQL
// condition on NEW, "true" for every row): a BEFORE INSERT row trigger, which PostgreSQL fires for
// every proposed row before the ON CONFLICT check, writes one row to chaos_insert_attempts. A
// proposed row that an ON CONFLICT clause turned away (DO NOTHING, or DO UPDATE on the existing
// row) is logged and not inserted, so attempts − rows is what the unique key refused. A row whose
// statement failed (a unique violation without ON CONFLICT) leaves no log: its transaction rolled
// the log back with it; those refusals are counted elsewhere (the client's error).
func InstallInsertLog(ctx context.Context, db Execer, table, where string) error {
	_, err := db.Exec(ctx, fmt.Sprintf(`
CREATE TABLE chaos_insert_attempts (n bigint GENERATED ALWAYS AS IDENTITY, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE FUNCTION chaos_log_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_insert_attempts DEFAULT VALUES;
    RETURN NEW;
END $$;
CREATE TRIGGER chaos_log_insert BEFORE INSERT ON %s FOR EACH ROW WHEN (%s) EXECUTE FUNCTION chaos_log_insert();`,
		pgx.Identifier{table}.Sanitize(), where))
	if err != nil {
		return fmt.Errorf("install the insert log on %s: %w", table, err)
	}
	return nil
}

// InsertAttempts is the number of rows InstallInsertLog's trigger logged.
func InsertAttempts(ctx context.Context, db Execer) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, "SELECT count(*) FROM chaos_insert_attempts").Scan(&n); err != nil {
		return 0, fmt.Errorf("count insert attempts: %w", err)
	}
	return n, nil
}
