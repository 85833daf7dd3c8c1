package drifttest

// settings: effective settings that change transaction semantics, from any source (issue 30,
// point 2).
var settings = []Case{}
