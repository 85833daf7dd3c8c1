package readiness_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/internal/testkit/testpg"
)

// readiness_contract.txt is regenerated from a database's catalogs (-update) by this package's
// own code, so a bug in that code could bless itself. The checks here derive what the file must
// hold from elsewhere, with none of this package's functions: the migration files' text, lines
// written by hand from the migrations, and information_schema (another view of the catalogs than
// the generator's query). checksums/independent_test.go does the same for migrations.sum.

const migrationsDir = "../sql/migrations"

// migrationFiles returns the text of every migration, by file name.
func migrationFiles(t *testing.T) map[string]string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(migrationsDir, "*.sql"))
	if err != nil || len(names) == 0 {
		t.Fatalf("list %s: %d files, %v", migrationsDir, len(names), err)
	}
	out := map[string]string{}
	for _, n := range names {
		out[filepath.Base(n)] = string(mustRead(t, n))
	}
	return out
}

// contractSections splits readiness_contract.txt into its objects: "table control_core.runs" or
// "function control_core.db_now_ms()" → the object's lines, without their indentation.
func contractSections(t *testing.T) map[string][]string {
	t.Helper()
	sections := map[string][]string{}
	current := ""
	sc := bufio.NewScanner(strings.NewReader(string(mustRead(t, "readiness_contract.txt"))))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "  "):
			if current == "" {
				t.Fatalf("readiness_contract.txt: %q belongs to no object", line)
			}
			sections[current] = append(sections[current], strings.TrimPrefix(line, "  "))
		default:
			current = line
			if _, dup := sections[current]; dup {
				t.Fatalf("readiness_contract.txt lists %q twice", current)
			}
			sections[current] = nil
		}
	}
	return sections
}

// names returns the sorted distinct first submatches of re in every text.
func names(re *regexp.Regexp, texts ...string) []string {
	set := map[string]bool{}
	for _, text := range texts {
		for _, m := range re.FindAllStringSubmatch(text, -1) {
			set[strings.ToLower(m[1])] = true
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

var (
	createTable    = regexp.MustCompile(`(?i)\bCREATE\s+TABLE\s+control_core\.(\w+)\s*\(`)
	createIndex    = regexp.MustCompile(`(?i)\bCREATE\s+(?:UNIQUE\s+)?INDEX\s+(\w+)`)
	dropIndex      = regexp.MustCompile(`(?i)\bDROP\s+INDEX\s+control_core\.(\w+)`)
	dropFunction   = regexp.MustCompile(`(?i)\bDROP\s+FUNCTION\s+control_core\.(\w+)`)
	createFunction = regexp.MustCompile(`(?i)\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:FUNCTION|PROCEDURE)\s+control_core\.(\w+)`)
	// a column line of a CREATE TABLE body as the migrations write them: four spaces, the name,
	// one of the types the schema uses
	columnLine = regexp.MustCompile(`^    (\w+)\s+(text|bigint|integer|uuid|jsonb|boolean)\b`)
	// an ALTER TABLE statement (up to its ";") and the columns it adds (pg-0022)
	alterTable = regexp.MustCompile(`(?is)\bALTER\s+TABLE\s+control_core\.(\w+)\b([^;]*);`)
	addColumn  = regexp.MustCompile(`(?i)\bADD\s+COLUMN\s+(\w+)\s+(text|bigint|integer|uuid|jsonb|boolean)\b`)
)

// liveIndexes are the indexes the migrations leave: each CREATE INDEX and DROP INDEX in the
// order the stream runs them (pg-0022 drops attempts_recovery_drift_idx and creates it again).
func liveIndexes(files map[string]string) []string {
	live := map[string]bool{}
	for _, file := range slices.Sorted(maps.Keys(files)) {
		text := files[file]
		type op struct {
			at     int
			name   string
			create bool
		}
		var ops []op
		for _, m := range createIndex.FindAllStringSubmatchIndex(text, -1) {
			ops = append(ops, op{m[0], strings.ToLower(text[m[2]:m[3]]), true})
		}
		for _, m := range dropIndex.FindAllStringSubmatchIndex(text, -1) {
			ops = append(ops, op{m[0], strings.ToLower(text[m[2]:m[3]]), false})
		}
		slices.SortFunc(ops, func(a, b op) int { return a.at - b.at })
		for _, o := range ops {
			live[o.name] = o.create
		}
	}
	var out []string
	for n, ok := range live {
		if ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Every table, column, index and function the migrations create is in the contract, and the
// contract has nothing the migrations do not create. The migrations create and never drop or
// rename, but for an index a later migration drops (pg-0020 drops runs_recovery_idx): checked
// here too, so that this derivation stays valid. A table's columns are those of its CREATE TABLE
// body and those its ALTER TABLE statements add (pg-0022).
func TestContractListsWhatTheMigrationsCreate(t *testing.T) {
	t.Parallel()
	files := migrationFiles(t)
	var all []string
	for _, text := range files {
		all = append(all, text)
	}
	if m := regexp.MustCompile(`(?i)\b(DROP\s+(TABLE|COLUMN)|RENAME\s+(TO|COLUMN))\b`).FindString(strings.Join(all, "\n")); m != "" {
		t.Fatalf("a migration has %q: this test derives the schema from CREATE statements alone; teach it the change", m)
	}
	// Functions are compared by name, so a DROP FUNCTION is allowed only where the same file creates
	// that name again after it (a signature change).
	for file, text := range files {
		for _, m := range dropFunction.FindAllStringSubmatchIndex(text, -1) {
			name := text[m[2]:m[3]]
			if !regexp.MustCompile(`(?i)\bCREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+control_core\.` + name + `\(`).MatchString(text[m[1]:]) {
				t.Fatalf("%s drops function %s and does not create it again: this test compares functions by name; teach it the change", file, name)
			}
		}
	}
	sections := contractSections(t)
	var contractTables, contractFunctions, contractIndexes []string
	contractColumns := map[string][]string{}
	for head, lines := range sections {
		switch {
		case strings.HasPrefix(head, "table control_core."):
			table := strings.TrimPrefix(head, "table control_core.")
			contractTables = append(contractTables, table)
			for _, l := range lines {
				if f := strings.Fields(l); len(f) >= 2 && f[0] == "column" {
					contractColumns[table] = append(contractColumns[table], f[1])
				}
				if f := strings.Fields(l); len(f) >= 2 && f[0] == "index" {
					contractIndexes = append(contractIndexes, f[1])
				}
			}
		case strings.HasPrefix(head, "function control_core."):
			name, _, _ := strings.Cut(strings.TrimPrefix(head, "function control_core."), "(")
			contractFunctions = append(contractFunctions, name)
		case head == "schema control_core":
			// the schema's other objects: goose's id sequence alone (goose creates it, no migration)
			if want := []string{"sequence goose_db_version_id_seq"}; len(lines) != 1 || !strings.HasPrefix(lines[0], want[0]+" ") {
				t.Errorf("readiness_contract.txt: schema control_core lists %q, want only %q", lines, want)
			}
		default:
			t.Errorf("readiness_contract.txt: an object of an unknown kind: %q", head)
		}
	}
	for _, c := range []struct {
		what            string
		migrations, got []string
	}{
		// goose's version table is created by goose (qlmigrate up), not by a migration
		{"tables", slices.Sorted(slices.Values(append(names(createTable, all...), "goose_db_version"))), contractTables},
		{"indexes", liveIndexes(files), contractIndexes},
		// by name: an overload (pg-0022's 7-argument task_digest) is one name here
		{"functions", names(createFunction, all...), slices.Compact(slices.Sorted(slices.Values(contractFunctions)))},
	} {
		sort.Strings(c.got)
		if len(c.migrations) == 0 || !slices.Equal(c.migrations, c.got) {
			t.Errorf("%s: the migrations create %v\nthe contract lists %v", c.what, c.migrations, c.got)
		}
	}

	// the columns each ALTER TABLE adds, by table
	added := map[string][]string{}
	for _, text := range files {
		for _, m := range alterTable.FindAllStringSubmatch(text, -1) {
			for _, c := range addColumn.FindAllStringSubmatch(m[2], -1) {
				added[strings.ToLower(m[1])] = append(added[strings.ToLower(m[1])], strings.ToLower(c[1]))
			}
		}
	}
	if len(added) == 0 {
		t.Errorf("no migration adds a column, yet pg-0022 does: the ALTER TABLE pattern reads nothing")
	}

	// the columns of each CREATE TABLE body, and those added later
	for file, text := range files {
		for _, loc := range createTable.FindAllStringSubmatchIndex(text, -1) {
			table := strings.ToLower(text[loc[2]:loc[3]])
			body := text[loc[1]:]
			end := strings.Index(body, "\n);")
			if end < 0 {
				t.Fatalf("%s: CREATE TABLE %s has no closing \");\" at the start of a line", file, table)
			}
			var cols []string
			for _, line := range strings.Split(body[:end], "\n") {
				if m := columnLine.FindStringSubmatch(line); m != nil {
					cols = append(cols, m[1])
				}
			}
			cols = append(cols, added[table]...)
			got := slices.Clone(contractColumns[table])
			sort.Strings(cols)
			sort.Strings(got)
			if len(cols) == 0 || !slices.Equal(cols, got) {
				t.Errorf("table %s: %s creates columns %v\nthe contract lists %v", table, file, cols, got)
			}
		}
	}
}

// Lines written by hand from 0014 (the schedule row and the claim's index), 0024 (its two
// missed-occurrence columns) and 0015 (db_now_ms), in the server's rendering: the contract must hold each exactly, in its object.
func TestContractHoldsLinesWrittenFromTheMigrations(t *testing.T) {
	t.Parallel()
	sections := contractSections(t)
	// 0014: NOT NULL where the migration says so, every other column nullable
	schedules := []string{
		"column project_id text not null",
		"column trigger_id text not null",
		"column trigger_revision bigint not null",
		"column next_fire_at_ms bigint null",
		"column last_scheduled_at_ms bigint null",
		"column state_version bigint not null",
		"column claim_owner text null",
		"column claim_token uuid null",
		"column claim_version bigint not null",
		"column claim_expires_at_ms bigint null",
		"column updated_at_ms bigint not null",
		// 0024: the missed-occurrence counter and the last missed occurrence (NULL: never)
		"column missed_total bigint not null default 0",
		"column last_missed_for_ms bigint null",
		"constraint trigger_schedules_missed_total_check CHECK ((missed_total >= 0))",
		// a claim is all four parts or none; the expiry lies after the last write
		"constraint trigger_schedules_claim_fence_check CHECK ((((claim_owner IS NULL) = (claim_token IS NULL)) AND ((claim_token IS NULL) = (claim_expires_at_ms IS NULL))))",
		"constraint trigger_schedules_claim_expiry_check CHECK ((claim_expires_at_ms > updated_at_ms))",
		"constraint trigger_schedules_claim_owner_check CHECK (((length(claim_owner) >= 1) AND (length(claim_owner) <= 128)))",
		"constraint trigger_schedules_pkey PRIMARY KEY (project_id, trigger_id)",
		"constraint trigger_schedules_project_id_trigger_id_trigger_revision_fkey FOREIGN KEY (project_id, trigger_id, trigger_revision) REFERENCES control_core.trigger_revisions(project_id, trigger_id, revision)",
		// coalesce(next_fire_at_ms, -1): uninitialised rows first, one range condition
		"index trigger_schedules_claim_idx CREATE INDEX trigger_schedules_claim_idx ON control_core.trigger_schedules USING btree (COALESCE(next_fire_at_ms, ('-1'::integer)::bigint), project_id, trigger_id)",
	}
	table := sections["table control_core.trigger_schedules"]
	for _, want := range schedules {
		if !slices.Contains(table, want) {
			t.Errorf("table control_core.trigger_schedules lacks %q", want)
		}
	}
	if n := countPrefix(table, "column "); n != 13 {
		t.Errorf("table control_core.trigger_schedules has %d columns in the contract, 0014 creates 11 and 0024 adds 2", n)
	}

	// 0015: LANGUAGE sql STABLE PARALLEL SAFE, no SET clause (so that it inlines), the body the
	// text between its dollar quotes
	body := regexp.MustCompile(`(?s)CREATE FUNCTION control_core\.db_now_ms\(\) RETURNS bigint\s.*?AS \$\$(.*?)\$\$;`).
		FindStringSubmatch(string(mustRead(t, filepath.Join(migrationsDir, "0015_database_time.sql"))))
	if body == nil {
		t.Fatal("0015_database_time.sql: no CREATE FUNCTION control_core.db_now_ms()")
	}
	sum := sha256.Sum256([]byte(body[1]))
	fn := sections["function control_core.db_now_ms()"]
	for _, want := range []string{"arguments", "returns bigint", "language sql", "volatility stable", "parallel safe",
		"security invoker", "config", "body sha256:" + hex.EncodeToString(sum[:]), "owner schema owner"} {
		if !slices.Contains(fn, want) {
			t.Errorf("function control_core.db_now_ms() lacks %q; it has %q", want, fn)
		}
	}
}

func countPrefix(lines []string, prefix string) int {
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// Every column line of the contract agrees with information_schema.columns of a freshly
// migrated database: name, type, nullability and default, read through another view than the
// generator's.
func TestContractColumnsAgreeWithInformationSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rows, err := testpg.New(t).Pool(t, "").Query(ctx, `SELECT table_name::text, column_name::text, data_type::text,
		is_nullable::text, coalesce(column_default::text, ''), coalesce(lower(identity_generation::text), '')
		FROM information_schema.columns
		WHERE table_schema = 'control_core'
		ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var want []string
	for rows.Next() {
		var table, column, typ, nullable, def, identity string
		if err := rows.Scan(&table, &column, &typ, &nullable, &def, &identity); err != nil {
			t.Fatal(err)
		}
		line := fmt.Sprintf("table control_core.%s: column %s %s %s", table, column, typ, map[string]string{"YES": "null", "NO": "not null"}[nullable])
		if def != "" {
			line += " default " + def
		}
		if identity != "" { // goose's id
			line += " generated " + identity + " as identity"
		}
		want = append(want, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for head, lines := range contractSections(t) {
		for _, l := range lines {
			if strings.HasPrefix(l, "column ") {
				got = append(got, head+": "+l)
			}
		}
	}
	sort.Strings(got)
	if len(want) == 0 || !slices.Equal(got, want) {
		t.Errorf("the contract's columns differ from information_schema.columns:\ncontract:\n%s\ninformation_schema:\n%s",
			strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
