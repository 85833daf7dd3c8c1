package drifttest

// database: the database's owner and its privileges (issue 30, point 3).
var database = []Case{}
