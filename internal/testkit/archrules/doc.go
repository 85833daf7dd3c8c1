// Package archrules holds no code, only the test that enforces the package rules of
// docs/architecture.md from the import graph `go list -deps` reports, and the one that the
// README's and docs' relative links resolve. `make lint` runs them.
package archrules
