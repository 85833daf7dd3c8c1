package main

import (
	"strings"
	"testing"
)

// trigger run-now, trigger archive and runs prune refuse bad input before connecting (exit 2,
// naming the flag): a prune younger than an hour above all, which must never reach a database.
func TestLifecycleCommandsBadInputExits2BeforeConnecting(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"trigger", "run-now", "--project", "p"}, "--trigger: trigger id"},
		{[]string{"trigger", "run-now", "--trigger", "t"}, "--project: project id"},
		{[]string{"trigger", "run-now", "--project", "p", "--trigger", "t", "--reason", strings.Repeat("r", 257)}, "--reason: want at most 256"},
		{[]string{"trigger", "run-now", "--project", "p", "--trigger", "t", "--request", "not-a-uuid"}, "--request \"not-a-uuid\": not a non-nil UUID"},
		{[]string{"trigger", "run-now", "--project", "p", "--trigger", "t", "--request", "00000000-0000-0000-0000-000000000000"}, "not a non-nil UUID"},
		{[]string{"trigger", "archive", "--project", "p", "--trigger", "T T"}, "--trigger: trigger id"},
		{[]string{"trigger", "archive", "--trigger", "t"}, "--project: project id"},
		{[]string{"runs", "prune", "--project", "p"}, "--older-than: 0s is below the minimum 1h0m0s"},
		{[]string{"runs", "prune", "--project", "p", "--older-than", "59m"}, "--older-than: 59m0s is below the minimum 1h0m0s"},
		{[]string{"runs", "prune", "--project", "p", "--older-than", "-720h"}, "--older-than: -720h0m0s is below the minimum"},
		{[]string{"runs", "prune", "--project", "p", "--older-than", "720h", "--batch", "0"}, "--batch: 0 is outside 1..10000"},
		{[]string{"runs", "prune", "--project", "p", "--older-than", "720h", "--batch", "10001"}, "--batch: 10001 is outside"},
		{[]string{"runs", "prune", "--older-than", "720h"}, "--project: project id"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			t.Parallel()
			exits2BeforeConnecting(t, c.args, c.want)
		})
	}
}
