// Package archrules holds no code, only the test that enforces the package rules of
// docs/architecture.md from the import graph `go list -deps` reports. `make lint` runs it.
package archrules
