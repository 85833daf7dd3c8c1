package checksums

import (
	"bufio"
	"bytes"
	"context"
	_ "embed" // the readiness contract
	"fmt"
	"io/fs"
	"regexp"
	"strings"

	"github.com/qlcontrol/controlcore/db"
)

// The readiness contract is what control-core v17 must have in schema control_core: every table,
// every column with its type, nullability and default, every primary/unique/foreign key, CHECK
// and exclusion constraint, every index that no constraint owns (among them the claim's
// trigger_schedules_claim_idx and startup recovery's runs_recovery_idx), and every function
// (db_now_ms, advance_capability, lock_project) with its signature, attributes and a sha256 of
// its body.
//
// It lives in one file, readiness_contract.txt beside this one, written the way the server
// renders each object (pg_get_constraintdef, pg_get_indexdef, format_type), so a reviewer reads
// it against sql/migrations and a test proves it equals the catalogs of a freshly migrated
// database. After a new migration, regenerate it with
//
//	go test ./checksums -run TestReadinessContractMatchesAFreshMigration -update
//
// and review the diff like any other change of the schema.

//go:embed readiness_contract.txt
var contractText []byte

// ContractFile is the contract's file name, for messages.
const ContractFile = "checksums/readiness_contract.txt"

// Fact is one line of the contract: an object header (table, function) or one property of it.
type Fact struct {
	Object string // "table control_core.runs", "function control_core.db_now_ms()"
	Kind   string // table, column, constraint, index | function, arguments, returns, language, …
	Name   string // the column, constraint or index name; "" for headers and function properties
	Def    string // the rendered definition
}

func (f Fact) key() string { return f.Object + "\x00" + f.Kind + "\x00" + f.Name }

// named kinds carry a name before their definition.
var named = map[string]bool{"column": true, "constraint": true, "index": true}

// Contract returns the committed readiness contract of control-core v17.
func Contract() ([]Fact, error) { return ParseContract(contractText) }

// ParseContract reads a contract file.
func ParseContract(b []byte) ([]Fact, error) {
	var (
		facts  []Fact
		object string
		line   int
	)
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line++
		text := sc.Text()
		if strings.TrimSpace(text) == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if !strings.HasPrefix(text, "  ") {
			kind, rest, ok := strings.Cut(text, " ")
			if !ok || (kind != "table" && kind != "function") {
				return nil, fmt.Errorf("readiness contract line %d: want \"table NAME\" or \"function SIGNATURE\", got %q", line, text)
			}
			object = text
			facts = append(facts, Fact{Object: object, Kind: kind, Def: rest})
			continue
		}
		if object == "" {
			return nil, fmt.Errorf("readiness contract line %d: a property before any table or function", line)
		}
		kind, rest, _ := strings.Cut(strings.TrimSpace(text), " ")
		f := Fact{Object: object, Kind: kind, Def: rest}
		if named[kind] {
			f.Name, f.Def, _ = strings.Cut(rest, " ")
		}
		facts = append(facts, f)
	}
	return facts, sc.Err()
}

// RenderContract writes facts as a contract file, grouped by object.
func RenderContract(facts []Fact) []byte {
	var b bytes.Buffer
	b.WriteString(`# control-core v17 readiness contract: what schema control_core must have.
# Generated from the catalogs of a freshly migrated database and reviewed against sql/migrations:
#   go test ./checksums -run TestReadinessContractMatchesAFreshMigration -update
# qlmigrate verify reads the same catalogs; a missing or different line is drift naming the object.
# Objects the contract does not list are reported as notes. Definitions are the server's own
# renderings (format_type, pg_get_expr, pg_get_constraintdef, pg_get_indexdef).
`)
	last := ""
	for _, f := range facts {
		if f.Object != last {
			b.WriteString("\n" + f.Object + "\n")
			last = f.Object
		}
		if f.Kind == "table" || f.Kind == "function" {
			continue
		}
		b.WriteString("  " + f.Kind)
		if f.Name != "" {
			b.WriteString(" " + f.Name)
		}
		if f.Def != "" {
			b.WriteString(" " + f.Def)
		}
		b.WriteString("\n")
	}
	return b.Bytes()
}

// ReadReadiness reads the facts of schema control_core from the catalogs. q must run on a
// transaction whose search_path is pg_catalog only, so that every name comes out qualified.
func ReadReadiness(ctx context.Context, q *db.Queries) ([]Fact, error) {
	tables, err := q.ReadinessTables(ctx)
	if err != nil {
		return nil, fmt.Errorf("read tables: %w", err)
	}
	columns, err := q.ReadinessColumns(ctx)
	if err != nil {
		return nil, fmt.Errorf("read columns: %w", err)
	}
	constraints, err := q.ReadinessConstraints(ctx)
	if err != nil {
		return nil, fmt.Errorf("read constraints: %w", err)
	}
	indexes, err := q.ReadinessIndexes(ctx)
	if err != nil {
		return nil, fmt.Errorf("read indexes: %w", err)
	}
	functions, err := q.ReadinessFunctions(ctx)
	if err != nil {
		return nil, fmt.Errorf("read functions: %w", err)
	}
	byTable := map[string][]Fact{}
	tableObject := func(t string) string { return "table control_core." + t }
	for _, c := range columns {
		def := c.DataType
		if c.NotNull {
			def += " not null"
		} else {
			def += " null"
		}
		if c.DefaultExpr != "" {
			def += " default " + c.DefaultExpr
		}
		byTable[c.TableName] = append(byTable[c.TableName], Fact{Object: tableObject(c.TableName), Kind: "column", Name: c.ColumnName, Def: def})
	}
	for _, c := range constraints {
		byTable[c.TableName] = append(byTable[c.TableName], Fact{Object: tableObject(c.TableName), Kind: "constraint", Name: c.ConstraintName, Def: c.Definition})
	}
	for _, i := range indexes {
		byTable[i.TableName] = append(byTable[i.TableName], Fact{Object: tableObject(i.TableName), Kind: "index", Name: i.IndexName, Def: i.Definition})
	}
	var facts []Fact
	for _, t := range tables {
		facts = append(facts, Fact{Object: tableObject(t), Kind: "table", Def: "control_core." + t})
		facts = append(facts, byTable[t]...)
	}
	for _, f := range functions {
		object := "function " + f.Signature
		facts = append(facts, Fact{Object: object, Kind: "function", Def: f.Signature})
		for _, p := range [][2]string{
			{"arguments", f.Arguments}, {"returns", f.Result}, {"language", f.Language},
			{"volatility", f.Volatility}, {"parallel", f.Parallel}, {"security", f.Security},
			{"config", f.Config}, {"body", "sha256:" + f.BodySha256},
		} {
			facts = append(facts, Fact{Object: object, Kind: p[0], Def: p[1]})
		}
	}
	return facts, nil
}

// ReadinessDrift reads the catalogs through q (which must run with search_path pg_catalog, so
// every name comes back schema-qualified as the contract writes it) and compares them with the
// contract.
func ReadinessDrift(ctx context.Context, q *db.Queries, loc Locator) ([]Drift, error) {
	contract, err := Contract()
	if err != nil {
		return nil, err
	}
	facts, err := ReadReadiness(ctx, q)
	if err != nil {
		return nil, err
	}
	return CompareReadiness(contract, facts, loc), nil
}

// CompareReadiness lists what the catalogs (actual) lack or hold differently from the contract,
// and, as notes, what they hold beyond it. loc names the migration that defines a missing
// object, for the fix.
func CompareReadiness(contract, actual []Fact, loc Locator) []Drift {
	have := make(map[string]Fact, len(actual))
	for _, f := range actual {
		have[f.key()] = f
	}
	want := make(map[string]bool, len(contract))
	listed := map[string]bool{}
	for _, f := range contract {
		want[f.key()] = true
		listed[f.Object] = true
	}
	var out []Drift
	missingObject := map[string]bool{}
	for _, f := range contract {
		if missingObject[f.Object] {
			continue // its header is reported missing; its properties would only repeat that
		}
		got, ok := have[f.key()]
		switch {
		case ok && got.Def == f.Def:
		case f.Kind == "table" || f.Kind == "function":
			missingObject[f.Object] = true
			out = append(out, missingDrift(f, loc))
		case !ok:
			out = append(out, missingDrift(f, loc))
		default:
			out = append(out, changedDrift(f, got, loc))
		}
	}
	for _, f := range actual {
		isHeader := f.Kind == "table" || f.Kind == "function"
		if want[f.key()] || (!isHeader && !listed[f.Object]) {
			continue // known, or a property of an extra table or function (its header says it)
		}
		out = append(out, Drift{
			Kind: "extra_" + f.Kind, Object: describe(f), Note: true,
			Message: fmt.Sprintf("%s is not in the readiness contract", describeKind(f)),
			Fix:     "none needed for readiness; if it belongs to control-core, add it with a migration and regenerate " + ContractFile,
		})
	}
	return out
}

// describe names an object the way a DBA looks it up.
func describe(f Fact) string {
	table := strings.TrimPrefix(f.Object, "table ")
	switch f.Kind {
	case "column":
		return table + "." + f.Name
	case "constraint":
		return f.Name + " on " + table
	case "index":
		return "control_core." + f.Name
	case "table":
		return table
	default: // function and its properties
		return strings.TrimPrefix(f.Object, "function ")
	}
}

func describeKind(f Fact) string {
	switch f.Kind {
	case "table", "column", "constraint", "index", "function":
		return f.Kind + " " + describe(f)
	default:
		return "function " + describe(f)
	}
}

func missingDrift(f Fact, loc Locator) Drift {
	origin := loc.Origin(f)
	d := Drift{Kind: "missing_" + f.Kind, Object: describe(f),
		Message: fmt.Sprintf("%s is missing (contract: %s)", describeKind(f), strings.TrimSpace(f.Kind+" "+f.Name+" "+f.Def))}
	table := strings.TrimPrefix(f.Object, "table ")
	switch f.Kind {
	case "index":
		d.Fix = f.Def + ";"
	case "constraint":
		d.Fix = fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s %s;", table, f.Name, f.Def)
	case "table", "function":
		d.Message = fmt.Sprintf("%s is missing", describeKind(f))
		d.Fix = "recreate it as " + origin + " defines it, or restore the database from a backup"
	case "column":
		d.Fix = "recreate it as " + origin + " defines it (" + f.Def + ")"
	default:
		d.Message = fmt.Sprintf("function %s lacks its %s (contract: %s)", describe(f), f.Kind, f.Def)
		d.Fix = "recreate the function as " + origin + " defines it"
	}
	return d
}

func changedDrift(want, got Fact, loc Locator) Drift {
	origin := loc.Origin(want)
	d := Drift{Kind: "changed_" + want.Kind, Object: describe(want),
		Message: fmt.Sprintf("%s differs from the contract: want %q, have %q", describeKind(want), want.Def, got.Def)}
	table := strings.TrimPrefix(want.Object, "table ")
	switch want.Kind {
	case "column":
		wantNotNull, gotNotNull := strings.Contains(want.Def, " not null"), strings.Contains(got.Def, " not null")
		sameTypeAndDefault := strings.Replace(want.Def, " not null", " null", 1) == strings.Replace(got.Def, " not null", " null", 1)
		switch {
		case sameTypeAndDefault && wantNotNull && !gotNotNull:
			d.Message = fmt.Sprintf("column %s is nullable; the contract says NOT NULL", describe(want))
			d.Fix = fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s SET NOT NULL;", table, want.Name)
		case sameTypeAndDefault && !wantNotNull && gotNotNull:
			d.Message = fmt.Sprintf("column %s is NOT NULL; the contract says nullable", describe(want))
			d.Fix = fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s DROP NOT NULL;", table, want.Name)
		default:
			d.Fix = "make it " + want.Def + " again, as " + origin + " defines it"
		}
	case "constraint":
		d.Fix = fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT %s, ADD CONSTRAINT %s %s;", table, want.Name, want.Name, want.Def)
	case "index":
		d.Fix = fmt.Sprintf("DROP INDEX control_core.%s; %s;", want.Name, want.Def)
	default:
		d.Message = fmt.Sprintf("function %s: its %s differs from the contract: want %q, have %q", describe(want), want.Kind, want.Def, got.Def)
		d.Fix = "recreate the function as " + origin + " defines it (CREATE OR REPLACE FUNCTION)"
	}
	return d
}

// Locator finds the migration that defines an object, for the fix of a missing one.
type Locator struct {
	migrations []Migration
	bodies     map[string]string
}

// NewLocator reads the migrations of fsys (nil-safe: an empty Locator names no file).
func NewLocator(fsys fs.FS, migrations []Migration) Locator {
	l := Locator{migrations: migrations, bodies: map[string]string{}}
	for _, m := range migrations {
		if b, err := fs.ReadFile(fsys, m.File); err == nil {
			l.bodies[m.File] = string(b)
		}
	}
	return l
}

// Origin names the first migration that mentions the object, e.g.
// "pg-0016-recovery-source (sql/migrations/0016_recovery_source.sql)".
func (l Locator) Origin(f Fact) string {
	var pattern string
	table := strings.TrimPrefix(strings.TrimPrefix(f.Object, "table "), "control_core.")
	switch f.Kind {
	case "constraint", "index":
		pattern = `\b` + regexp.QuoteMeta(f.Name) + `\b`
	case "table", "column":
		pattern = `(?i)CREATE TABLE control_core\.` + regexp.QuoteMeta(table) + `\b`
	default:
		fn := strings.TrimPrefix(f.Object, "function control_core.")
		fn, _, _ = strings.Cut(fn, "(")
		pattern = `(?i)CREATE (OR REPLACE )?FUNCTION control_core\.` + regexp.QuoteMeta(fn) + `\(`
	}
	re := regexp.MustCompile(pattern)
	for _, m := range l.migrations {
		if re.MatchString(l.bodies[m.File]) {
			return m.Name + " (sql/migrations/" + m.File + ")"
		}
	}
	if f.Kind == "constraint" { // an unnamed constraint: its table's migration
		return l.Origin(Fact{Object: f.Object, Kind: "table"})
	}
	return "the migrations"
}
