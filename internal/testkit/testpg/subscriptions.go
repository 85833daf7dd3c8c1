package testpg

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// dropSubscriptions drops every subscription of the database at url (a drift case creates one):
// DROP DATABASE refuses a database a subscription belongs to, even WITH (FORCE), and DROP
// SUBSCRIPTION works only in the subscription's own database. slot_name = NONE first, so that
// nothing tries to reach a publisher.
func dropSubscriptions(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil // a case that closed the database to connections made none: DROP DATABASE says so if it did
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `DO $$
DECLARE s text;
BEGIN
    FOR s IN SELECT subname FROM pg_catalog.pg_subscription
             WHERE subdbid = (SELECT oid FROM pg_catalog.pg_database WHERE datname = pg_catalog.current_database())
    LOOP
        EXECUTE pg_catalog.format('ALTER SUBSCRIPTION %I DISABLE', s);
        EXECUTE pg_catalog.format('ALTER SUBSCRIPTION %I SET (slot_name = NONE)', s);
        EXECUTE pg_catalog.format('DROP SUBSCRIPTION %I', s);
    END LOOP;
END $$`)
	if err != nil {
		return fmt.Errorf("drop subscriptions: %w", err)
	}
	return nil
}
