package cli

import (
	"errors"
	"fmt"
	"testing"

	"github.com/spf13/cobra"
)

// Explain reaches the error of a command at any depth of the tree, and only errors.
func TestExplainWrapsEveryCommandsError(t *testing.T) {
	boom := errors.New("boom")
	root := &cobra.Command{Use: "root"}
	parent := &cobra.Command{Use: "parent"}
	leaf := &cobra.Command{Use: "leaf", RunE: func(*cobra.Command, []string) error { return boom }}
	ok := &cobra.Command{Use: "ok", RunE: func(*cobra.Command, []string) error { return nil }}
	parent.AddCommand(leaf, ok)
	root.AddCommand(parent)
	Explain(root, func(err error) error {
		if err == nil {
			return nil
		}
		return fmt.Errorf("explained: %w", err)
	})
	for _, tc := range []struct {
		args []string
		want string
	}{{[]string{"parent", "leaf"}, "explained: boom"}, {[]string{"parent", "ok"}, ""}} {
		root.SetArgs(tc.args)
		err := root.Execute()
		if got := fmt.Sprint(err); tc.want == "" && err != nil || tc.want != "" && (got != tc.want || !errors.Is(err, boom)) {
			t.Errorf("%v: %v; want %q", tc.args, err, tc.want)
		}
	}
}
