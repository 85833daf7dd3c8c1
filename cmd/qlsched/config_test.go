package main

import (
	"reflect"
	"testing"

	"github.com/qlcontrol/controlcore/coordinator"
	"github.com/qlcontrol/controlcore/internal/app/cli"
)

// Every field of coordinator.Config has its flag in cli.ConfigFlags, and qlsched run defines that
// flag: a ConfigError is always reported with the flag the user typed.
func TestEveryConfigFieldHasItsFlag(t *testing.T) {
	t.Parallel()
	run := (&app{}).runCmd()
	for _, f := range reflect.VisibleFields(reflect.TypeFor[coordinator.Config]()) {
		flag, ok := cli.ConfigFlags[f.Name]
		if !ok {
			t.Errorf("coordinator.Config.%s has no flag in cli.ConfigFlags", f.Name)
			continue
		}
		if run.Flags().Lookup(flag[2:]) == nil {
			t.Errorf("cli.ConfigFlags maps %s to %s, which qlsched run does not define", f.Name, flag)
		}
	}
	if len(cli.ConfigFlags) != reflect.TypeFor[coordinator.Config]().NumField() {
		t.Errorf("cli.ConfigFlags has %d entries for %d Config fields", len(cli.ConfigFlags), reflect.TypeFor[coordinator.Config]().NumField())
	}
}
