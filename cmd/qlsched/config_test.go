package main

import (
	"reflect"
	"testing"

	"github.com/qlcontrol/controlcore/coordinator"
)

// Every field of coordinator.Config has its flag in configFlags, and qlsched run defines that
// flag: a ConfigError is always reported with the flag the user typed.
func TestEveryConfigFieldHasItsFlag(t *testing.T) {
	t.Parallel()
	run := (&app{}).runCmd()
	for _, f := range reflect.VisibleFields(reflect.TypeFor[coordinator.Config]()) {
		flag, ok := configFlags[f.Name]
		if !ok {
			t.Errorf("coordinator.Config.%s has no flag in configFlags", f.Name)
			continue
		}
		if run.Flags().Lookup(flag[2:]) == nil {
			t.Errorf("configFlags maps %s to %s, which qlsched run does not define", f.Name, flag)
		}
	}
	if len(configFlags) != reflect.TypeFor[coordinator.Config]().NumField() {
		t.Errorf("configFlags has %d entries for %d Config fields", len(configFlags), reflect.TypeFor[coordinator.Config]().NumField())
	}
}
