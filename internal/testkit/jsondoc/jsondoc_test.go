package jsondoc

import (
	"slices"
	"testing"

	"github.com/spf13/cobra"
)

func TestNotSnakeCaseFindsEveryBadKeyAtAnyDepth(t *testing.T) {
	doc := map[string]any{"schema": "x", "okKey": 1, "list": []any{map[string]any{"run_id": 1, "Bad": 2}}}
	bad := NotSnakeCase("", doc)
	slices.Sort(bad)
	if want := []string{".list[].Bad", ".okKey"}; !slices.Equal(bad, want) {
		t.Fatalf("NotSnakeCase = %v, want %v", bad, want)
	}
}

func TestCommandsListsRunnableLeaves(t *testing.T) {
	root := &cobra.Command{Use: "tool"}
	root.PersistentFlags().String("format", "text", "")
	group := &cobra.Command{Use: "project"}
	group.AddCommand(&cobra.Command{Use: "list", Run: func(*cobra.Command, []string) {}})
	root.AddCommand(group, &cobra.Command{Use: "status", Run: func(*cobra.Command, []string) {}})
	got := Commands(t, root)
	if len(got) != 2 || got["project list"] == nil || got["status"] == nil {
		t.Fatalf("Commands = %v, want project list and status", got)
	}
}
