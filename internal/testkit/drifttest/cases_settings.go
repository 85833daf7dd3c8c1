package drifttest

// settings: effective settings that change transaction semantics, from any source (issue 30,
// point 2). The four roles' and the database's stored settings are issue 16's (firstRound); these
// reach the session that verifies and migrates (the superuser of the test, a DBA's role), which
// the roles' model does not cover, and are read in the session itself. A server-wide setting
// (postgresql.conf, ALTER SYSTEM) would reach every parallel test of the shared server: it is
// tested on a server of its own (internal/app/verify TestSettingsFromAlterSystemNameTheirSource).
var settings = []Case{
	{Name: "session_replication_role for the migrating role in this database",
		SQL:    `ALTER ROLE CURRENT_USER IN DATABASE {db} SET session_replication_role = replica`,
		Object: "session_replication_role = replica from the role", Runtime: false},
	{Name: "synchronous_commit off for the migrating role in this database",
		SQL:    `ALTER ROLE CURRENT_USER IN DATABASE {db} SET synchronous_commit = off`,
		Object: "synchronous_commit = off from the role", Runtime: false},
	{Name: "synchronous_commit off for the runtime role in this database",
		SQL:    `ALTER ROLE {runtime} IN DATABASE {db} SET synchronous_commit = off`,
		Object: "synchronous_commit", Runtime: true},
}
