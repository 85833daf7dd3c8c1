// Package jsondoc holds what the JSON-contract tests of both binaries check (docs/json.md): the
// one key style of every document, and the commands of a cobra tree that must each print a
// document or refuse --format json. Tests only.
package jsondoc

import (
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// snakeCase is the one key style of every JSON document.
var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// NotSnakeCase returns the path of every key below v, at any depth, that is not snake_case.
func NotSnakeCase(path string, v any) []string {
	var bad []string
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			if !snakeCase.MatchString(k) {
				bad = append(bad, path+"."+k)
			}
			bad = append(bad, NotSnakeCase(path+"."+k, child)...)
		}
	case []any:
		for _, child := range v {
			bad = append(bad, NotSnakeCase(path+"[]", child)...)
		}
	}
	return bad
}

// Commands is every command of root's tree that runs (cobra's own help and completion aside), by
// its words after the binary's name; a command without a --format flag fails t.
func Commands(t testing.TB, root *cobra.Command) map[string]*cobra.Command {
	t.Helper()
	leaves := map[string]*cobra.Command{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if !c.Runnable() || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		if c.Flag("format") == nil {
			t.Errorf("%s has no --format flag", c.CommandPath())
		}
		leaves[strings.TrimPrefix(c.CommandPath(), root.Name()+" ")] = c
	}
	walk(root)
	return leaves
}
