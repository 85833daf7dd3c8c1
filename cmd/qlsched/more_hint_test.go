package main

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// The "more" hint of a paged list is a command line to paste into a shell: every value in it is
// shell-quoted, so the shell gives back exactly the arguments that reproduce the page's filters
// (in flag-name order, then --after).
// An explicit empty --project (all projects) printed bare made the pasted line read "--project
// --limit" (the project became "--limit", 1 a stray argument).
func TestMoreHintIsOneShellWordPerArgument(t *testing.T) {
	t.Parallel()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	for _, tc := range []struct {
		name string
		args []string
		next string
		want []string
	}{
		{"plain", []string{"--project", "a", "--limit", "5"}, "a/t5", []string{"--limit", "5", "--project", "a", "--after", "a/t5"}},
		{"empty project", []string{"--project", "", "--limit", "1"}, "a/t1", []string{"--limit", "1", "--project", "", "--after", "a/t1"}},
		{"shell syntax in a value", []string{"--project", "x' $(echo pwned) \"y\n"}, "p/t", []string{"--project", "x' $(echo pwned) \"y\n", "--after", "p/t"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var project, after string
			var limit int
			cmd := &cobra.Command{Use: "list", Run: func(*cobra.Command, []string) {}}
			cmd.Flags().StringVar(&project, "project", "", "")
			cmd.Flags().StringVar(&after, "after", "", "")
			cmd.Flags().IntVar(&limit, "limit", 100, "")
			if err := cmd.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			printMore(&out, cmd, 1, tc.next)
			_, line, ok := strings.Cut(strings.TrimSuffix(out.String(), "\n"), "next page: list")
			if !ok {
				t.Fatalf("no hint in %q", out.String())
			}
			// the shell's words, each ended by a NUL
			got, err := exec.Command(sh, "-c", `printf '%s\0' `+line).Output()
			if err != nil {
				t.Fatalf("sh -c %q: %v", line, err)
			}
			words := strings.Split(strings.TrimSuffix(string(got), "\x00"), "\x00")
			if !slices.Equal(words, tc.want) {
				t.Errorf("hint %q reads back as %q; want %q", line, words, tc.want)
			}
		})
	}
}
