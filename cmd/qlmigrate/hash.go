package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/qlcontrol/controlcore/checksums"
	"github.com/qlcontrol/controlcore/internal/app/cli"
)

func (a *app) hashCmd() *cobra.Command {
	var (
		check bool
		dir   string
	)
	cmd := &cobra.Command{
		Use:   "hash [--check] [--dir sql/migrations]",
		Short: "Rewrite or check the integrity file sql/migrations/migrations.sum",
		Long: `hash writes migrations.sum in the migrations folder: a first line with a sum over the file
lines, then one line per *.sql file, "<file> h1:<base64 sha256 of its bytes>", in version order
(in the spirit of atlas.sum). Commit it with the migrations: the binary embeds both, and
"qlmigrate verify" checks that its own embedded stream still matches.

hash --check changes nothing: it exits 1 and names each file that was edited, added, removed or
renamed since migrations.sum was written (and says so if the list itself was edited by hand).
CI runs it ("make lint"). hash works on the source tree only: it never connects to a database
and reads no connection settings (--database-url, QL_DATABASE_URL and PG* are ignored).

A migration that has been applied must never change: put a change in a new migration, then run
"qlmigrate hash" and commit migrations.sum with it.`,
		Example: `  qlmigrate hash --check
  qlmigrate hash --dir sql/migrations`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			info, err := os.Stat(dir)
			if err != nil || !info.IsDir() {
				return cli.Usagef("--dir %q: not a folder of migrations (run from the repository root, or pass --dir)", dir)
			}
			fsys := os.DirFS(dir)
			sumPath := filepath.Join(dir, checksums.SumFileName)
			if check {
				problems, err := checksums.CheckSum(fsys)
				if err != nil {
					return err
				}
				if a.json() {
					if problems == nil {
						problems = []checksums.SumProblem{}
					}
					if err := writeJSON(out, struct {
						Schema   string                 `json:"schema"`
						File     string                 `json:"file"`
						OK       bool                   `json:"ok"`
						Problems []checksums.SumProblem `json:"problems"`
					}{schemaHashCheck, sumPath, len(problems) == 0, problems}); err != nil {
						return err
					}
				} else {
					for _, p := range problems {
						fmt.Fprintf(out, "%-10s %s\n", p.Kind, p)
					}
				}
				if len(problems) > 0 {
					return cli.Problemf("%s does not match the migrations in %s (%d problem(s)); if the change is intended and no database has applied the old files, run `qlmigrate hash --dir %s` and commit %s",
						sumPath, dir, len(problems), dir, checksums.SumFileName)
				}
				if !a.json() {
					fmt.Fprintf(out, "%s matches the migrations in %s\n", sumPath, dir)
				}
				return nil
			}
			// Refuse to bless a stream the binary could not run (bad names, duplicate versions).
			if _, err := checksums.Load(fsys); err != nil {
				return cli.Problemf("%s: %v", dir, err)
			}
			sum, err := checksums.ComputeSum(fsys)
			if err != nil {
				return err
			}
			if err := os.WriteFile(sumPath, sum.Bytes(), 0o644); err != nil {
				return fmt.Errorf("write %s: %w", sumPath, err)
			}
			if a.json() {
				return writeJSON(out, struct {
					Schema string `json:"schema"`
					File   string `json:"file"`
					Sum    string `json:"sum"`
					Files  int    `json:"files"`
				}{schemaHash, sumPath, sum.Sum, len(sum.Entries)})
			}
			fmt.Fprintf(out, "wrote %s: %d migrations, %s\n", sumPath, len(sum.Entries), sum.Sum)
			return nil
		},
	}
	cmd.Flags().BoolVar(&check, "check", false, "check instead of rewriting: exit 1 naming each edited, added, removed or renamed file")
	cmd.Flags().StringVar(&dir, "dir", "sql/migrations", "the migrations folder (holds NNNN_slug.sql and migrations.sum)")
	return cmd
}
