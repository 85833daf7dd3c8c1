package main

import (
	"go/build"
	"slices"
	"testing"
)

// cmd/qlsched is wiring: flags, config, packages, signals. The generated queries are the
// packages' edge (admin, coordinator, verify …), never the command's.
func TestCommandDoesNotImportGeneratedQueries(t *testing.T) {
	t.Parallel()
	pkg, err := build.Default.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(pkg.Imports, "github.com/qlcontrol/controlcore/db") {
		t.Errorf("cmd/qlsched imports github.com/qlcontrol/controlcore/db; want it to use admin's readers and publisher")
	}
}
