package drifttest

// builtins: the pg_catalog functions the schema depends on (issue 30, point 6).
var builtins = []Case{}
