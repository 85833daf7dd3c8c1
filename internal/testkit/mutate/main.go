// Command mutate is the mutation harness of `make mutate` (docs/testing.md): it applies each
// mutation of a written list, one at a time, to a copy of the repository, runs the tests the list
// names for it, and reports whether they killed it (failed) or it survived (they passed).
//
// It never touches the checkout it is started in (other work goes on there): every worker has its
// own copy of the tree (by default `git archive HEAD`, the committed state). A mutation of
// sql/queries is compiled by sqlc into db/ in that copy before the tests run, so the tests see the
// query as the binaries would; a mutation of a migration (a rule function the queries call) has
// the copy's integrity file and readiness contract rewritten from the mutated stream, so that only
// the named tests, not the checksum checks, can kill it; every changed file is restored byte for
// byte afterwards.
//
//	go run ./internal/testkit/mutate [-subset ci] [-only id,id] [-jobs 2] [-doc docs/testing.md]
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

func main() {
	list := flag.String("list", "internal/testkit/mutate/mutations.txt", "the mutation list")
	subset := flag.String("subset", "", "run only the mutations tagged with this subset (e.g. ci)")
	only := flag.String("only", "", "run only these mutation ids, comma-separated")
	jobs := flag.Int("jobs", 2, "mutations tested at once, each in its own copy of the tree")
	timeout := flag.Duration("timeout", 5*time.Minute, "time limit of one mutation's tests")
	tree := flag.String("tree", "HEAD", `what to copy: a commit ("HEAD"), or "worktree" for the checkout's files as they are`)
	doc := flag.String("doc", "", "write the result table into this file, between its mutate markers")
	flag.Parse()
	if err := run(*list, *subset, *only, *jobs, *timeout, *tree, *doc); err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(1)
	}
}

func run(listPath, subset, only string, jobs int, timeout time.Duration, tree, doc string) error {
	start := time.Now()
	text, err := os.ReadFile(listPath)
	if err != nil {
		return fmt.Errorf("read the mutation list: %w", err)
	}
	all, err := Parse(string(text))
	if err != nil {
		return fmt.Errorf("%s: %w", listPath, err)
	}
	ms := Select(all, subset, only)
	if len(ms) == 0 {
		return fmt.Errorf("no mutation in %s matches subset %q, ids %q", listPath, subset, only)
	}
	jobs = max(1, min(jobs, len(ms)))
	tmp, err := os.MkdirTemp("", "qlmutate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	copies := make([]string, jobs)
	for i := range copies {
		copies[i] = filepath.Join(tmp, fmt.Sprintf("w%d", i))
		if err := copyTree(tree, copies[i]); err != nil {
			return fmt.Errorf("copy the tree: %w", err)
		}
	}
	sqlc := filepath.Join(tmp, "sqlc")
	if out, err := command(context.Background(), copies[0], "go", "build", "-modfile=tools/go.mod", "-o", sqlc, "github.com/sqlc-dev/sqlc/cmd/sqlc"); err != nil {
		return fmt.Errorf("build sqlc: %w\n%s", err, out)
	}
	// Every mutation must apply exactly once, and a query mutation must change what sqlc
	// generates, before any test runs: a list that no longer matches the code fails loudly.
	for _, m := range ms {
		restore, err := m.apply(copies[0], sqlc)
		if err != nil {
			return err
		}
		if err := restore(); err != nil {
			return fmt.Errorf("mutation %s: restore: %w", m.ID, err)
		}
	}
	fmt.Printf("mutate: %d mutations, %d at a time, tree %s; baseline first\n", len(ms), jobs, tree)
	if err := baseline(copies, ms, timeout); err != nil {
		return err
	}

	results := make([]Result, len(ms))
	work := make(chan int)
	var wg sync.WaitGroup
	for _, dir := range copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				results[i] = ms[i].test(dir, sqlc, timeout)
				r := results[i]
				fmt.Printf("  %-28s %-9s %-60s %5.1fs\n", ms[i].ID, r.Status, r.Killer, r.Took.Seconds())
			}
		}()
	}
	for i := range ms {
		work <- i
	}
	close(work)
	wg.Wait()

	table := Table(ms, results, time.Since(start), jobs)
	fmt.Print("\n" + table)
	if doc != "" {
		if err := writeDoc(doc, subset, only, table); err != nil {
			return err
		}
	}
	var bad []string
	for i, r := range results {
		if r.Status != Killed {
			bad = append(bad, ms[i].ID+" "+string(r.Status))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%d of %d mutations not killed: %s", len(bad), len(ms), strings.Join(bad, ", "))
	}
	return nil
}

// Mutation is one small change to one rule: in File, within the region that starts at In (a
// query's name for sql/queries, else a line prefix such as "func scrub("), Search is replaced
// by Replace; it must occur there exactly once.
type Mutation struct {
	ID, File, In, What string
	Subsets            []string
	Tests              []TestRun
	Search, Replace    string
	line               int // of its header in the list
}

// TestRun is `go test -run Run Package`.
type TestRun struct{ Package, Run string }

// Parse reads the list. A mutation is a block:
//
//	== id [subset …]
//	file: path
//	in:   region (optional)
//	what: what it breaks
//	test: ./package/ -run pattern (one or more lines)
//	- text to find (several lines: one block, joined by newlines; "- " is stripped)
//	+ text to put instead (none: the text is removed)
//
// Lines starting with # and blank lines between blocks are ignored.
func Parse(text string) ([]Mutation, error) {
	var out []Mutation
	var m *Mutation
	var minus, plus []string
	seen := map[string]bool{}
	flush := func() error {
		if m == nil {
			return nil
		}
		switch {
		case m.File == "" || m.What == "" || len(m.Tests) == 0 || len(minus) == 0:
			return fmt.Errorf("line %d: mutation %s needs file:, what:, test: and a - line", m.line, m.ID)
		case seen[m.ID]:
			return fmt.Errorf("line %d: mutation id %s used twice", m.line, m.ID)
		}
		seen[m.ID] = true
		m.Search, m.Replace = strings.Join(minus, "\n"), strings.Join(plus, "\n")
		out = append(out, *m)
		m, minus, plus = nil, nil, nil
		return nil
	}
	for n, line := range strings.Split(text, "\n") {
		key, val, _ := strings.Cut(line, ":")
		val = strings.TrimSpace(val)
		switch {
		case strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" && m == nil:
		case strings.HasPrefix(line, "== "):
			if err := flush(); err != nil {
				return nil, err
			}
			f := strings.Fields(line[3:])
			if len(f) == 0 {
				return nil, fmt.Errorf("line %d: a mutation without an id", n+1)
			}
			m = &Mutation{ID: f[0], Subsets: f[1:], line: n + 1}
		case m == nil:
			return nil, fmt.Errorf("line %d: %q outside a mutation block", n+1, line)
		case strings.HasPrefix(line, "- ") || line == "-":
			minus = append(minus, strings.TrimPrefix(strings.TrimPrefix(line, "-"), " "))
		case strings.HasPrefix(line, "+ ") || line == "+":
			plus = append(plus, strings.TrimPrefix(strings.TrimPrefix(line, "+"), " "))
		case strings.TrimSpace(line) == "":
		case key == "file":
			m.File = val
		case key == "in":
			m.In = val
		case key == "what":
			m.What = val
		case key == "test":
			pkg, pattern, ok := strings.Cut(val, " ")
			if !ok || !strings.HasPrefix(pkg, "./") {
				return nil, fmt.Errorf("line %d: want test: ./package/ pattern", n+1)
			}
			m.Tests = append(m.Tests, TestRun{Package: pkg, Run: strings.TrimSpace(pattern)})
		default:
			return nil, fmt.Errorf("line %d: unknown line %q in mutation %s", n+1, line, m.ID)
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// Select keeps the mutations of subset (all when empty) whose id is in only (all when empty).
func Select(all []Mutation, subset, only string) []Mutation {
	var ids []string
	if only != "" {
		ids = strings.Split(only, ",")
	}
	var out []Mutation
	for _, m := range all {
		if (subset == "" || slices.Contains(m.Subsets, subset)) && (ids == nil || slices.Contains(ids, m.ID)) {
			out = append(out, m)
		}
	}
	return out
}

// Mutate returns src with the mutation applied, or an error unless its search text occurs exactly
// once in its region.
func (m Mutation) Mutate(src string) (string, error) {
	lo, hi := 0, len(src)
	if m.In != "" {
		head, end := m.In, "\nfunc "
		if strings.HasSuffix(m.File, ".sql") {
			head, end = "-- name: "+m.In+" ", "\n-- name: "
		}
		i := strings.Index(src, head)
		if i < 0 || strings.Count(src, head) > 1 {
			return "", fmt.Errorf("mutation %s: region %q is not in %s exactly once", m.ID, m.In, m.File)
		}
		lo = i
		if j := strings.Index(src[i+len(head):], end); j >= 0 {
			hi = i + len(head) + j
		}
	}
	region := src[lo:hi]
	if n := strings.Count(region, m.Search); n != 1 {
		return "", fmt.Errorf("mutation %s: %q occurs %d times in %s (region %q); want exactly once", m.ID, m.Search, n, m.File, m.In)
	}
	return src[:lo] + strings.Replace(region, m.Search, m.Replace, 1) + src[hi:], nil
}

// apply mutates the copy in dir (for a query, regenerating db/) and returns the function that
// restores every file it changed.
func (m Mutation) apply(dir, sqlc string) (restore func() error, err error) {
	path := filepath.Join(dir, m.File)
	orig, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mutation %s: %w", m.ID, err)
	}
	mutated, err := m.Mutate(string(orig))
	if err != nil {
		return nil, err
	}
	saved := map[string][]byte{path: orig}
	restore = func() error {
		var errs []error
		for p, b := range saved {
			errs = append(errs, os.WriteFile(p, b, 0o644))
		}
		return errors.Join(errs...)
	}
	if err := os.WriteFile(path, []byte(mutated), 0o644); err != nil {
		return nil, errors.Join(err, restore())
	}
	if strings.HasPrefix(m.File, "sql/migrations/") {
		// A rule function of a migration: the mutated file no longer matches the integrity file
		// or the readiness contract, which would fail every test that migrates a database for
		// the wrong reason. Rewrite both in the copy from the mutated stream, as a developer
		// editing the migration would, so only the tests the list names can kill the mutant.
		for _, f := range derivedFromMigrations {
			g := filepath.Join(dir, f)
			b, err := os.ReadFile(g)
			if err != nil {
				return nil, errors.Join(err, restore())
			}
			saved[g] = b
		}
		for _, args := range derivingCommands {
			if out, err := command(context.Background(), dir, "go", args...); err != nil {
				return nil, errors.Join(fmt.Errorf("mutation %s: go %s: %w\n%s", m.ID, strings.Join(args, " "), err, out), restore())
			}
		}
		return restore, nil
	}
	if strings.HasPrefix(m.File, "sql/") {
		gen, _ := filepath.Glob(filepath.Join(dir, "db", "*.go"))
		before := map[string][]byte{}
		for _, g := range gen {
			if before[g], err = os.ReadFile(g); err != nil {
				return nil, errors.Join(err, restore())
			}
			saved[g] = before[g]
		}
		if out, err := command(context.Background(), dir, sqlc, "generate"); err != nil {
			return nil, errors.Join(fmt.Errorf("mutation %s: sqlc generate: %w\n%s", m.ID, err, out), restore())
		}
		changed := false
		for _, g := range gen {
			after, err := os.ReadFile(g)
			if err != nil {
				return nil, errors.Join(err, restore())
			}
			changed = changed || !bytes.Equal(after, before[g])
		}
		if !changed {
			return nil, errors.Join(fmt.Errorf("mutation %s: sqlc generates the same code: the change is not in a query", m.ID), restore())
		}
	}
	return restore, nil
}

// derivedFromMigrations are the files derivingCommands rewrite from sql/migrations (paths in the tree).
var derivedFromMigrations = []string{"sql/migrations/migrations.sum", "readiness/readiness_contract.txt"}

// derivingCommands rewrite the integrity file and the readiness contract (docs/testing.md), run
// with "go" in the copy.
var derivingCommands = [][]string{
	{"run", "./cmd/qlmigrate", "hash"},
	{"test", "-count=1", "-run", "^TestReadinessContractMatchesAFreshMigration$", "./readiness", "-update"},
}

// Status is how a mutation ended.
type Status string

const (
	Killed   Status = "killed"
	Survived Status = "SURVIVED"
	Broken   Status = "ERROR" // the mutant did not build, or the tests could not run
)

// Result is one mutation's outcome: the test that failed, or why there was none.
type Result struct {
	Status Status
	Killer string
	Took   time.Duration
}

var failLine = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

// test applies m in dir, runs its tests in order until one fails, and restores dir.
func (m Mutation) test(dir, sqlc string, timeout time.Duration) (r Result) {
	start := time.Now()
	defer func() { r.Took = time.Since(start) }()
	restore, err := m.apply(dir, sqlc)
	if err != nil {
		return Result{Status: Broken, Killer: err.Error()}
	}
	defer func() {
		if err := restore(); err != nil {
			r = Result{Status: Broken, Killer: "restore: " + err.Error()}
		}
	}()
	for _, t := range m.Tests {
		out, err := goTest(dir, t, timeout)
		if err == nil {
			continue
		}
		if names := failLine.FindAllStringSubmatch(out, -1); len(names) > 0 {
			killer := names[0][1]
			for _, n := range names { // the deepest failing subtest names the check
				if strings.HasPrefix(n[1], names[0][1]) && len(n[1]) > len(killer) {
					killer = n[1]
				}
			}
			return Result{Status: Killed, Killer: killer}
		}
		if strings.Contains(out, "panic: test timed out") {
			return Result{Status: Killed, Killer: "timeout in " + t.Package}
		}
		return Result{Status: Broken, Killer: firstLines(out, 3)}
	}
	return Result{Status: Survived, Killer: "-"}
}

func goTest(dir string, t TestRun, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+30*time.Second)
	defer cancel()
	return command(ctx, dir, "go", "test", "-count=1", "-failfast", "-timeout", timeout.String(), "-run", t.Run, t.Package)
}

// baseline runs every package's tests of the selection once on the unmutated copies: a mutation
// is only killed by a test that passes without it.
func baseline(copies []string, ms []Mutation, timeout time.Duration) error {
	byPkg := map[string][]string{}
	var pkgs []string
	for _, m := range ms {
		for _, t := range m.Tests {
			if _, ok := byPkg[t.Package]; !ok {
				pkgs = append(pkgs, t.Package)
			}
			if !slices.Contains(byPkg[t.Package], t.Run) {
				byPkg[t.Package] = append(byPkg[t.Package], t.Run)
			}
		}
	}
	errs := make([]error, len(pkgs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, len(copies))
	for i, pkg := range pkgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			// One run of every top-level test the mutations name, all of their subtests included:
			// a superset of what any mutation runs.
			var top []string
			for _, p := range byPkg[pkg] {
				first, _, _ := strings.Cut(p, "/")
				if !slices.Contains(top, "(?:"+first+")") {
					top = append(top, "(?:"+first+")")
				}
			}
			run := strings.Join(top, "|")
			start := time.Now()
			if out, err := goTest(copies[i%len(copies)], TestRun{Package: pkg, Run: run}, timeout); err != nil {
				errs[i] = fmt.Errorf("baseline: the tests of %s fail without any mutation (-run %q):\n%s", pkg, run, firstLines(out, 30))
				return
			}
			fmt.Printf("  baseline %-24s ok %5.1fs\n", pkg, time.Since(start).Seconds())
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Table renders the results as a Markdown table with a summary line.
func Table(ms []Mutation, rs []Result, took time.Duration, jobs int) string {
	var b strings.Builder
	counts := map[Status]int{}
	b.WriteString("| id | file | what it changes | result | killed by | time |\n| --- | --- | --- | --- | --- | --- |\n")
	for i, m := range ms {
		r := rs[i]
		counts[r.Status]++
		killer := r.Killer
		if r.Status == Killed {
			killer = "`" + killer + "`"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %.1fs |\n", m.ID, m.File, strings.ReplaceAll(m.What, "|", "\\|"), r.Status,
			strings.ReplaceAll(killer, "|", "\\|"), r.Took.Seconds())
	}
	fmt.Fprintf(&b, "\n%d mutations: %d killed, %d survived, %d errors; %s in all (%d at a time).\n",
		len(ms), counts[Killed], counts[Survived], counts[Broken], took.Round(time.Second), jobs)
	return b.String()
}

const docBegin, docEnd = "<!-- mutate:begin -->", "<!-- mutate:end -->"

// writeDoc replaces the part of path between the markers with the table.
func writeDoc(path, subset, only, table string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("write the table: %w", err)
	}
	s := string(b)
	i, j := strings.Index(s, docBegin), strings.Index(s, docEnd)
	if i < 0 || j < i {
		return fmt.Errorf("write the table: %s has no %s … %s", path, docBegin, docEnd)
	}
	what := "the whole list"
	if subset != "" || only != "" {
		what = fmt.Sprintf("subset %q, ids %q", subset, only)
	}
	body := fmt.Sprintf("%s\n<!-- written by `go run ./internal/testkit/mutate -doc %s` (%s), %s -->\n\n%s%s",
		docBegin, path, what, time.Now().UTC().Format("2006-01-02"), table, docEnd)
	return os.WriteFile(path, []byte(s[:i]+body+s[j+len(docEnd):]), 0o644)
}

// copyTree puts the repository's files into dir: a commit's (git archive), or with "worktree"
// the checkout's tracked and untracked, not ignored, files as they are.
func copyTree(tree, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if tree != "worktree" {
		archive := exec.Command("git", "archive", tree)
		untar := exec.Command("tar", "-x", "-C", dir)
		pipe, err := archive.StdoutPipe()
		if err != nil {
			return err
		}
		untar.Stdin = pipe
		var stderr bytes.Buffer
		archive.Stderr, untar.Stderr = &stderr, &stderr
		if err := untar.Start(); err != nil {
			return err
		}
		if err := archive.Run(); err != nil {
			return fmt.Errorf("git archive %s: %w: %s", tree, err, stderr.String())
		}
		if err := untar.Wait(); err != nil {
			return fmt.Errorf("tar: %w: %s", err, stderr.String())
		}
		return nil
	}
	out, err := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		return fmt.Errorf("git ls-files: %w", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if err := copyFile(f, filepath.Join(dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// command runs name in dir and returns its combined output.
func command(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[:min(n, len(lines))], " / ")
}
