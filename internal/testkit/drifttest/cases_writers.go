package drifttest

// writers: writes that arrive from outside the roles, checks bypassed (issue 30, point 5).
var writers = []Case{
	// connect = false: no publisher needed, no table yet; ENABLE and REFRESH PUBLICATION would
	// start applying whatever the publisher publishes, as the owner, with no trigger firing.
	{Name: "a subscription created without connecting",
		SQL:    `CREATE SUBSCRIPTION ql_sub CONNECTION 'dbname=nowhere' PUBLICATION everything WITH (connect = false)`,
		Object: "subscription ql_sub", Runtime: true},
}
