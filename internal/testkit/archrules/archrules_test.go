package archrules

import (
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/qlcontrol/controlcore"

var update = flag.Bool("update", false, "rewrite the package map of docs/architecture.md from the import graph")

// root is the repository, from this package's folder.
const root = "../../.."

// pkg is what `go list -json` says about one package.
type pkg struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Imports    []string
	Deps       []string
	Module     *struct{ Path string }
}

func list(t *testing.T, patterns ...string) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json=ImportPath,Dir,GoFiles,Imports,Deps,Module"}, patterns...)...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", patterns, err)
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode go list: %v", err)
		}
		pkgs[p.ImportPath] = p
	}
	if len(pkgs) == 0 {
		t.Fatalf("go list %v listed no package", patterns)
	}
	return pkgs
}

// rel is path inside the module ("" for a path outside it).
func rel(path string) string {
	if r, ok := strings.CutPrefix(path, module+"/"); ok {
		return r
	}
	return ""
}

// Floors, bottom up: a package imports only from its own floor or below (rule 2 of
// docs/architecture.md). The test kit stands beside the house: it may use every floor, and
// nothing else imports it.
const (
	floorBase = iota
	floorDomain
	floorApp
	floorCmd
	floorTestkit
)

var floorNames = []string{"internal/base", "domain", "internal/app", "cmd", "internal/testkit"}

func floorOf(r string) int {
	switch {
	case strings.HasPrefix(r, "internal/base/"):
		return floorBase
	case strings.HasPrefix(r, "internal/app/"):
		return floorApp
	case strings.HasPrefix(r, "internal/testkit/"):
		return floorTestkit
	case strings.HasPrefix(r, "cmd/"):
		return floorCmd
	}
	return floorDomain
}

// testOnly is what a binary must not link: the test kit, the testing package, and the modules
// only tests use (the container harness, the Kubernetes manifests' schema).
func testOnly(path string) bool {
	r := rel(path)
	return strings.HasPrefix(r, "internal/testkit/") || path == "testing" || strings.HasPrefix(path, "testing/") ||
		strings.HasPrefix(path, "github.com/testcontainers/") || strings.HasPrefix(path, "k8s.io/") ||
		strings.HasPrefix(path, "sigs.k8s.io/")
}

// production are the binaries an operator deploys; the bench and the demo are tools beside them.
var production = []string{"cmd/qlsched", "cmd/qlmigrate", "cmd/qlworker"}

// productionLater are production binaries being written in parallel (issue 32's qlworker): their
// absence is not yet an error. Remove an entry once its command is merged.
var productionLater = []string{"cmd/qlworker"}

// notInProduction is what the production binaries do not link beyond test code: the bench, the
// demo, and throwaway clusters (they spawn initdb).
var notInProduction = []string{"internal/app/bench", "internal/app/demo", "internal/app/pgcluster"}

// Rule 1.
func TestCommandsAreWiringOnly(t *testing.T) {
	for path, p := range list(t, "./cmd/...") {
		if slices.Contains(p.Imports, module+"/db") {
			t.Errorf("%s imports %s/db: generated rows stay behind the store and admin packages", path, module)
		}
	}
}

// dbImporters are the packages rule 1 of docs/architecture.md lets import db.
var dbImporters = []string{"coordinator", "admin", "dispatch", "readiness", "roles", "internal/app/migrate",
	"internal/app/verify", "internal/app/metrics", "internal/app/bench"}

// Rule 1.
func TestGeneratedRowsStayBehindTheStores(t *testing.T) {
	for path, p := range list(t, "./...") {
		if slices.Contains(p.Imports, module+"/db") && !slices.Contains(dbImporters, rel(path)) {
			t.Errorf("%s imports %s/db: only %v may (rule 1 of docs/architecture.md)", path, module, dbImporters)
		}
	}
}

// Rule 2.
func TestNoImportRunsUpAFloor(t *testing.T) {
	pkgs := list(t, "./...")
	if len(pkgs) < 30 {
		t.Fatalf("go list ./... listed %d packages; want the whole module", len(pkgs))
	}
	for path, p := range pkgs {
		from := floorOf(rel(path))
		for _, imp := range p.Imports {
			r := rel(imp)
			if r == "" {
				continue
			}
			to := floorOf(r)
			switch {
			case to == floorTestkit && from != floorTestkit:
				t.Errorf("%s imports %s: only tests use the test kit", rel(path), r)
			case to > from && from != floorTestkit:
				t.Errorf("%s (%s) imports %s (%s): no import runs up a floor", rel(path), floorNames[from], r, floorNames[to])
			}
		}
	}
}

// Rule 3.
func TestTheDecisionKnowsNoDatabase(t *testing.T) {
	p := list(t, "./schedule")[module+"/schedule"]
	for _, dep := range p.Deps {
		if dep == module+"/db" || strings.HasPrefix(dep, "github.com/jackc/") {
			t.Errorf("schedule depends on %s: the cron decision must be testable without a database", dep)
		}
	}
}

// Workers know no database: the worker side of the closed loop (issue 32) reaches the dispatcher
// over HTTP only. A worker holds a token, never database credentials, so none of these may depend
// on db, the database handle or pgx; this is also rule 4's "qlworker links no pgx". A package not
// written yet is skipped, not failed.
var workerSide = []string{"workerproto", "worker", "worker/process", "cmd/qlworker"}

func TestWorkersKnowNoDatabase(t *testing.T) {
	pkgs := list(t, "./...")
	for _, w := range workerSide {
		p, ok := pkgs[module+"/"+w]
		if !ok {
			continue
		}
		for _, dep := range p.Deps {
			if dep == module+"/db" || dep == module+"/internal/base/dbconn" || strings.HasPrefix(dep, "github.com/jackc/") {
				t.Errorf("%s depends on %s: workers know no database (they speak only the worker protocol)", w, dep)
			}
		}
	}
}

// Rule 4.
func TestBinariesShipNoTestCode(t *testing.T) {
	cmds := list(t, "./cmd/...")
	for _, c := range production {
		if _, ok := cmds[module+"/"+c]; !ok && !slices.Contains(productionLater, c) {
			t.Errorf("%s: no such command; the list of production binaries is stale", c)
		}
	}
	for path, p := range cmds {
		for _, dep := range p.Deps {
			if testOnly(dep) {
				t.Errorf("%s links %s, a test-only package", rel(path), dep)
			}
			if slices.Contains(production, rel(path)) && slices.Contains(notInProduction, rel(dep)) {
				t.Errorf("%s links %s: a production binary ships no bench, demo or throwaway cluster", rel(path), rel(dep))
			}
		}
	}
}

// opens are the functions that open a database connection; only internal/base/dbconn calls
// them, so every connection gets its bounds, its pooler mode and its redaction (rule 5).
var opens = map[string][]string{
	"github.com/jackc/pgx/v5":         {"Connect", "ConnectConfig", "ConnectWithOptions"},
	"github.com/jackc/pgx/v5/pgxpool": {"New", "NewWithConfig"},
	"github.com/jackc/pgx/v5/pgconn":  {"Connect", "ConnectConfig", "ConnectWithOptions"},
	"github.com/jackc/pgx/v5/stdlib":  {"OpenDB", "OpenDBFromPool", "GetDefaultDriver"},
	"database/sql":                    {"Open", "OpenDB"},
}

// bareHandleAllowed may hold a bare pool: the bench measures on direct connections.
var bareHandleAllowed = []string{"internal/app/bench"}

// Rule 5: one connection route, one handle. In every file a command links, outside dbconn:
// nothing opens a connection, and nothing holds a bare pool (pgxpool, a handle's Pool()) or
// begins on a Conn's embedded pgx.Conn, which would begin without the prologue that keeps the
// bounds behind a transaction pooler.
func TestOneConnectionRouteOneHandle(t *testing.T) {
	linked := map[string]bool{}
	for _, p := range list(t, "./cmd/...") {
		for _, dep := range p.Deps {
			linked[dep] = true
		}
	}
	checked := 0
	for path, p := range list(t, "./...") {
		if !linked[path] || rel(path) == "internal/base/dbconn" {
			continue
		}
		for _, f := range p.GoFiles {
			checked++
			for _, problem := range handleProblems(t, filepath.Join(p.Dir, f), !slices.Contains(bareHandleAllowed, rel(path))) {
				t.Errorf("%s:%s", filepath.Join(rel(path), f), problem)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked %d files; want every file the binaries link", checked)
	}
}

// handleProblems returns what in file breaks rule 5, each as "line: what".
func handleProblems(t *testing.T, file string, handleOnly bool) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("parse %s: %v", file, err)
	}
	var found []string
	at := func(n ast.Node, what string) {
		found = append(found, fmt.Sprintf("%d: %s", fset.Position(n.Pos()).Line, what))
	}
	names := map[string]string{} // local name → import path
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if path == "github.com/jackc/pgx/v5/pgxpool" && handleOnly {
			at(imp, "imports pgxpool; take a *dbconn.DB")
		}
		if _, ok := opens[path]; !ok {
			continue
		}
		name := filepath.Base(path)
		if path == "github.com/jackc/pgx/v5" {
			name = "pgx"
		}
		if imp.Name != nil {
			name = imp.Name.Name
		}
		names[name] = path
	}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && slices.Contains(opens[names[id.Name]], sel.Sel.Name) {
				at(sel, "opens a connection; go through internal/base/dbconn")
			}
		}
		call, ok := n.(*ast.CallExpr)
		if !ok || !handleOnly {
			return true
		}
		if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
			switch inner, _ := sel.X.(*ast.SelectorExpr); {
			case sel.Sel.Name == "Pool" && len(call.Args) == 0:
				at(call, "reaches for a handle's bare pool")
			case inner != nil && inner.Sel.Name == "Conn" && strings.HasPrefix(sel.Sel.Name, "Begin"):
				at(call, "begins on a Conn's embedded pgx.Conn, past the prologue")
			}
		}
		return true
	})
	return found
}

// Rule 6. The package map of docs/architecture.md is the import graph: each package of the module, its
// floor and what it imports of the module, between the two markers. -update rewrites it.
func TestThePackageMapIsTheImportGraph(t *testing.T) {
	const begin, end = "<!-- package map: begin (go test ./internal/testkit/archrules -update) -->", "<!-- package map: end -->"
	docPath := filepath.Join(root, "docs/architecture.md")
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	head, rest, ok1 := strings.Cut(string(doc), begin)
	_, tail, ok2 := strings.Cut(rest, end)
	if !ok1 || !ok2 {
		t.Fatalf("docs/architecture.md lacks the package map's markers %q … %q", begin, end)
	}
	want := packageMap(list(t, "./..."))
	if *update {
		if err := os.WriteFile(docPath, []byte(head+begin+want+end+tail), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if got, _, _ := strings.Cut(rest, end); got != want {
		t.Errorf("docs/architecture.md's package map is not the import graph; run go test ./internal/testkit/archrules -update and review the diff\nwant:%s", want)
	}
	// every package has a row in the table of what it holds, and every row a package
	pkgs := list(t, "./...")
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		if _, ok := pkgs[module+"/"+m[1]]; !ok {
			t.Errorf("docs/architecture.md has a row for %s, which is no package", m[1])
		}
	}
	for path := range pkgs {
		r := rel(path)
		if floorOf(r) == floorTestkit || r == "sql/migrations" || r == "deploy/kubernetes" {
			continue
		}
		if !strings.Contains(string(doc), "| `"+r+"` |") {
			t.Errorf("docs/architecture.md: no row says what %s holds", r)
		}
	}
}

// row is a line of the table of what each package holds.
var row = regexp.MustCompile("(?m)^\\| `([a-z0-9/]+)` \\|")

// packageMap renders the module's packages floor by floor, top down.
func packageMap(pkgs map[string]pkg) string {
	byFloor := make([][]string, len(floorNames))
	for path, p := range pkgs {
		r := rel(path)
		var imps []string
		for _, imp := range p.Imports {
			if ri := rel(imp); ri != "" {
				imps = append(imps, ri)
			}
		}
		slices.Sort(imps)
		line := r
		if len(imps) > 0 {
			line += " ──► " + strings.Join(imps, ", ")
		}
		byFloor[floorOf(r)] = append(byFloor[floorOf(r)], line)
	}
	var b strings.Builder
	b.WriteString("\n```\n")
	for _, f := range []int{floorCmd, floorApp, floorDomain, floorBase, floorTestkit} {
		slices.Sort(byFloor[f])
		fmt.Fprintf(&b, "%s\n", floorNames[f])
		for _, l := range byFloor[f] {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	b.WriteString("```\n")
	return b.String()
}
