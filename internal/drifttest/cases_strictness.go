package drifttest

// strictness: readiness as strict as the docs, and what a least-privileged role may do without
// stopping the fleet (issue 30, points 7 and 8).
var strictness = []Case{}
