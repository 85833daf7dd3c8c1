package drifttest

// enforcement: what an index or relation enforces beside its definition, and the whole schema
// with no exclusions (issue 30, points 1 and 4).
var enforcement = []Case{}
