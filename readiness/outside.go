package readiness

import (
	"context"
	"fmt"
	"strings"

	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
)

// What writes into, or computes for, control_core from outside the readiness contract's objects
// and the four roles: logical-replication subscriptions of this database (SubscriptionDrift) and
// a redefined built-in (BuiltinDrift, which verify runs before every other check). q must run
// with search_path pg_catalog (see ReadFacts).

// SubscriptionDrift reports every subscription of this database. A subscription's apply worker
// writes the rows its publisher sends as the subscription's owner with session_replication_role
// = replica, so the tables' ordinary triggers and the foreign keys' triggers do not fire and
// nothing of the privilege model applies: Runs written that way are checked by nothing.
//
// Every subscription is drift, not only one that already has control_core tables
// (pg_subscription_rel): the tables it applies are decided on the publisher, which this
// database cannot see. A publication FOR ALL TABLES or FOR TABLES IN SCHEMA control_core there,
// and one ALTER SUBSCRIPTION … REFRESH PUBLICATION (or ENABLE, for one created with connect =
// false) here, starts writing into control_core without any change this check could wait for.
// A database that must subscribe to something else keeps it in another database.
//
// What else writes from outside, and why it is not a finding here: a foreign table
// (postgres_fdw, loopback or not) writes through an ordinary session of the user mapping's role,
// where every trigger, key and privilege applies (the privilege audit covers that role's grants);
// a replication origin (pg_replication_origin_session_setup, superuser only) only labels a
// session's changes, and the bypass it is used with, session_replication_role = replica, is a
// setting, checked with the settings; a REPLICATION role reads changes through logical decoding
// but writes nothing; BYPASSRLS changes nothing while the contract keeps row-level security off
// on every table (and the four roles' attributes are audited by the roles package).
func SubscriptionDrift(ctx context.Context, conn dbconn.Querier) ([]Drift, error) {
	q := db.New(conn)
	subs, err := q.OutsideSubscriptions(ctx)
	if err != nil {
		return nil, fmt.Errorf("read subscriptions: %w", err)
	}
	out := make([]Drift, 0, len(subs))
	for _, s := range subs {
		name := ident(s.Name)
		// DROP SUBSCRIPTION drops the remote slot, which needs a connection to the publisher and
		// cannot run inside a transaction block; with slot_name = NONE (which needs the
		// subscription disabled) it does neither, so the three run inside the fix's one
		// transaction. The slot stays on the publisher: whoever runs the fix drops it there.
		stmts := []string{
			fmt.Sprintf("ALTER SUBSCRIPTION %s DISABLE;", name),
			fmt.Sprintf("ALTER SUBSCRIPTION %s SET (slot_name = NONE);", name),
			fmt.Sprintf("DROP SUBSCRIPTION %s;", name),
		}
		state := "disabled"
		if s.Enabled {
			state = "enabled"
		}
		tables := "no control_core table yet: the publisher decides which tables a refresh adds"
		if s.ControlCoreTables != "" {
			tables = "it applies rows to control_core." + s.ControlCoreTables
		}
		fix := "remove it: " + stmts[0] + " " + stmts[1] + " " + stmts[2]
		if s.SlotName != "" {
			fix += fmt.Sprintf(" (then drop its replication slot on the publisher: SELECT pg_drop_replication_slot('%s'))", strings.ReplaceAll(s.SlotName, "'", "''"))
		}
		out = append(out, Drift{Kind: "subscription", Object: "subscription " + s.Name,
			Message: fmt.Sprintf("subscription %s (%s, publications %s) writes into this database as its owner with session_replication_role = replica, "+
				"so no trigger or foreign key of control_core checks what it writes; %s", name, state, s.Publications, tables),
			Fix: fix, SQL: stmts})
	}
	return out, nil
}
