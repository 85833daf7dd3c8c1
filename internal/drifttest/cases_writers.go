package drifttest

// writers: writes that arrive from outside the roles, checks bypassed (issue 30, point 5).
var writers = []Case{}
