package dbconn

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Outside this package and the tools that measure or test it, nothing holds a bare pool or
// reaches past a handle to begin a transaction: a *pgxpool.Pool (or a handle's Pool(), or a
// Conn's embedded pgx.Conn) begins transactions without the prologue, which behind a transaction
// pooler silently drops the bounds. The packages above take a *DB or a *Conn and begin through it.
func TestNoTransactionBypassesTheHandle(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found from %s: %v", root, err)
	}
	// not production code that begins transactions: generated queries, test kits, this package,
	// the bench (a measurement tool on direct connections) and separate modules
	skip := []string{"db", "internal/testkit", "internal/base/dbconn", "internal/app/bench", "bench", ".git"}
	var problems []string
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if e.IsDir() {
			for _, s := range skip {
				if rel == s {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "github.com/jackc/pgx/v5/pgxpool" {
				problems = append(problems, fset.Position(imp.Pos()).String()+": imports pgxpool (take a *dbconn.DB)")
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			switch inner, _ := sel.X.(*ast.SelectorExpr); {
			case sel.Sel.Name == "Pool" && len(call.Args) == 0:
				problems = append(problems, fset.Position(call.Pos()).String()+": reaches for a handle's bare pool")
			case inner != nil && inner.Sel.Name == "Conn" && strings.HasPrefix(sel.Sel.Name, "Begin"):
				problems = append(problems, fset.Position(call.Pos()).String()+": begins on a Conn's embedded pgx.Conn")
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
