package drifttest

// database: the database's owner and its privileges (issue 30, point 3). ALTER DATABASE … OWNER
// changes a shared catalog's row, but only this test's database's.
var database = []Case{
	{Name: "the database owned by the runtime role",
		SQL: `ALTER DATABASE {db} OWNER TO {runtime}`, Object: "which may therefore drop it", Runtime: true},
	{Name: "CREATE on the database for the runtime role",
		SQL: `GRANT CREATE ON DATABASE {db} TO {runtime}`, Object: "CREATE on database", Runtime: true},
	{Name: "CONNECT WITH GRANT OPTION on the database for the admin role",
		SQL:    `GRANT CONNECT ON DATABASE {db} TO {admin} WITH GRANT OPTION`,
		Object: "CONNECT on database", Runtime: false},
	// A temporary table lives in the session's own pg_temp schema: the runtime's statements name
	// every relation with its schema, so nothing the runtime reads changes.
	{Name: "TEMPORARY on the database for the worker ingress role",
		SQL: `GRANT TEMPORARY ON DATABASE {db} TO {worker}`, Object: "TEMPORARY on database", Runtime: false},
}
