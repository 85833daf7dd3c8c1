package readiness

import (
	"bufio"
	"bytes"
	"context"
	_ "embed" // the readiness contract
	"fmt"
	"io/fs"
	"regexp"
	"strings"

	"github.com/qlcontrol/controlcore/checksums"
	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
)

// The readiness contract is what control-core v28 must have in schema control_core, and
// everything in the catalogs that decides what a statement on its tables does or who may do it:
// every table with its kind, persistence, row-level security and replica identity; every column
// with its type, collation, nullability, default, identity and generation; every primary/unique/
// foreign key, CHECK and exclusion constraint (deferrability and validation included); every
// index that no constraint owns (among them the claim's trigger_schedules_claim_idx and startup
// recovery's runs_recovery_idx); every user trigger and the enabled state of every trigger, the
// foreign keys' internal ones by their constraint; policies, rules and inheritance (none); and
// every function (db_now_ms, advance_capability, lock_project, …) with its signature,
// attributes, owner and a sha256 of its body; the switches beside those definitions that decide
// what they enforce (enforcement.go); and every other object of the schema. Goose's version
// table is one of the tables: nothing in control_core is skipped. Event triggers of the
// database are read too: the contract has none, and an enabled one is drift.
//
// It lives in one file, readiness_contract.txt beside this one, written the way the server
// renders each object (pg_get_constraintdef, pg_get_indexdef, pg_get_triggerdef, format_type),
// so a reviewer reads it against sql/migrations and a test proves it equals the catalogs of a
// freshly migrated database. After a new migration, regenerate it with
//
//	go test ./readiness -run TestReadinessContractMatchesAFreshMigration -update
//
// and review the diff like any other change of the schema.

//go:embed readiness_contract.txt
var contractText []byte

// ContractFile is the contract's file name, for messages.
const ContractFile = "readiness/readiness_contract.txt"

// Fact is one line of the contract: an object header (table, function) or one property of it.
type Fact struct {
	Object string // "table control_core.runs", "function control_core.db_now_ms()", "database"
	Kind   string // table, column, constraint, index, trigger, … | function, arguments, returns, …
	Name   string // the column, constraint, index, trigger … name; "" for headers and plain properties
	Def    string // the rendered definition

	// Set only on facts read from the catalogs, never on the contract's: what Compare
	// needs for a fact the contract lacks or holds differently. The zero value classifies an
	// unknown extra fact as drift without a fix, so a fact nobody classified fails closed.
	inert  bool       // beyond the contract, it cannot change what a statement does: a note
	why    string     // beyond the contract, how it changes what statements do
	remove []string   // beyond the contract, the statements that remove it (or make it inert)
	col    *columnDef // a column's parts
	ref    string     // internal_triggers and inherits: the Object of the other table; owner: the schema owner; publication: the statement that removes it; constraint_index: the foreign keys that depend on it
}

func (f Fact) key() string { return f.Object + "\x00" + f.Kind + "\x00" + f.Name }

// Drift is one difference between the catalogs and the contract (or the built-ins of a fresh
// server): what is wrong, naming the object, and how to fix it. Reports print the Object before
// the Message, so the Message does not repeat it. A Note is reported but is not drift (it does not
// fail verify).
type Drift struct {
	Kind    string // e.g. missing_column, changed_function, extra_trigger, extra_builtin, subscription
	Object  string // the schema object, named as a DBA looks it up
	Message string
	Fix     string // what to do, in words (it holds SQL's statements too, where there are any)
	// SQL holds the statements that remove the drift, each ending in ";", for a superuser to run
	// in one transaction in this order; empty where no safe statement exists (Fix says why).
	SQL  []string
	Note bool
}

// databaseObject is the Object of facts about the whole database (its event triggers), which
// the contract holds none of: there is no header to list them under.
const databaseObject = "database"

// named kinds carry a name before their definition.
var named = map[string]bool{
	"column": true, "constraint": true, "index": true, "trigger": true, "trigger_enabled": true,
	"internal_triggers": true, "policy": true, "rule": true, "inherits": true, "inherited_by": true,
	"event_trigger": true, "publication": true, "index_flags": true, "constraint_flags": true,
	"internal_trigger_definitions": true, "constraint_index": true,
}

// Contract returns the committed readiness contract of control-core v28.
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
			if !ok || (kind != "table" && kind != "function" && kind != "schema") {
				return nil, fmt.Errorf("readiness contract line %d: want \"table NAME\", \"function SIGNATURE\" or \"schema NAME\", got %q", line, text)
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
		if named[kind] || object == schemaObject {
			f.Name, f.Def, _ = strings.Cut(rest, " ")
		}
		facts = append(facts, f)
	}
	return facts, sc.Err()
}

// RenderContract writes facts as a contract file, grouped by object. Facts about the database
// (event triggers) are left out: the contract allows none, and has no header for them.
func RenderContract(facts []Fact) []byte {
	var b bytes.Buffer
	b.WriteString(`# control-core v28 readiness contract: what schema control_core must have.
# Generated from the catalogs of a freshly migrated database and reviewed against sql/migrations:
#   go test ./readiness -run TestReadinessContractMatchesAFreshMigration -update
# qlmigrate verify reads the same catalogs; a missing or different line is drift naming the object.
# Objects the contract does not list are drift where they can change what a statement does (a
# trigger, policy, rule, constraint, unique or expression index, a column with a default or NOT
# NULL, an enabled event trigger), else notes. Definitions are the server's own renderings
# (format_type, pg_get_expr, pg_get_constraintdef, pg_get_indexdef, pg_get_triggerdef).
# flags, index_flags and constraint_flags are the catalog switches those renderings do not show
# (pg_class, pg_index, pg_constraint); a gate (relhasindex, relhastriggers, …) reads ok unless it
# is off while what it gates exists, atthasdef ok while every column's agrees with pg_attrdef.
# constraint_index is the index a key or exclusion constraint checks writes with (pg_get_indexdef).
# Goose's version table is listed like any other, and
# "schema control_core" lists every object of the schema that is neither a table nor a function.
`)
	last := ""
	for _, f := range facts {
		if f.Object == databaseObject {
			continue
		}
		if f.Object != last {
			b.WriteString("\n" + f.Object + "\n")
			last = f.Object
		}
		if f.Kind == "table" || f.Kind == "function" || f.Kind == "schema" {
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

// ReadFacts reads the facts of schema control_core from the catalogs. q must run on a
// transaction whose search_path is pg_catalog only, so that every name comes out qualified.
func ReadFacts(ctx context.Context, conn dbconn.Querier) ([]Fact, error) {
	q := db.New(conn)
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
	triggers, err := q.ReadinessTriggers(ctx)
	if err != nil {
		return nil, fmt.Errorf("read triggers: %w", err)
	}
	policies, err := q.ReadinessPolicies(ctx)
	if err != nil {
		return nil, fmt.Errorf("read policies: %w", err)
	}
	rules, err := q.ReadinessRules(ctx)
	if err != nil {
		return nil, fmt.Errorf("read rules: %w", err)
	}
	inheritance, err := q.ReadinessInheritance(ctx)
	if err != nil {
		return nil, fmt.Errorf("read inheritance: %w", err)
	}
	functions, err := q.ReadinessFunctions(ctx)
	if err != nil {
		return nil, fmt.Errorf("read functions: %w", err)
	}
	eventTriggers, err := q.ReadinessEventTriggers(ctx)
	if err != nil {
		return nil, fmt.Errorf("read event triggers: %w", err)
	}
	publications, err := q.ReadinessPublications(ctx)
	if err != nil {
		return nil, fmt.Errorf("read publications: %w", err)
	}

	byTable := map[string][]Fact{}
	add := func(table string, f Fact) {
		f.Object = tableObject(table)
		byTable[table] = append(byTable[table], f)
	}
	for _, c := range columns {
		cd := columnDef{typ: c.DataType, collation: c.Collation, notNull: c.NotNull, def: c.DefaultExpr,
			identity: c.Identity, generated: c.Generated, domainBase: c.DomainBase}
		f := Fact{Kind: "column", Name: c.ColumnName, Def: cd.String(), col: &cd}
		f.inert, f.why, f.remove = cd.extra(qualified(c.TableName), ident(c.ColumnName))
		add(c.TableName, f)
	}
	for _, c := range constraints {
		add(c.TableName, Fact{Kind: "constraint", Name: c.ConstraintName, Def: c.Definition,
			why:    "every write it covers checks it and fails when the check does",
			remove: []string{fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT %s;", qualified(c.TableName), ident(c.ConstraintName))}})
	}
	for _, i := range indexes {
		f := Fact{Kind: "index", Name: i.IndexName, Def: i.Definition, inert: !i.IsUnique && !i.Evaluates,
			remove: []string{fmt.Sprintf("DROP INDEX %s;", qualified(i.IndexName))}}
		if i.IsUnique {
			f.why = "a unique index makes a second row with the same key fail"
		} else {
			f.why = "every write evaluates its expressions or predicate, and fails when they raise"
		}
		add(i.TableName, f)
	}
	for _, t := range triggers {
		if !t.Internal {
			drop := []string{fmt.Sprintf("DROP TRIGGER %s ON %s;", ident(t.TriggerName), qualified(t.TableName))}
			add(t.TableName, Fact{Kind: "trigger", Name: t.TriggerName, Def: t.Definition, remove: drop,
				why: "it runs its function on the statements it fires for"})
			add(t.TableName, Fact{Kind: "trigger_enabled", Name: t.TriggerName, Def: t.Enabled, remove: drop,
				why: "it runs its function on the statements it fires for"})
			continue
		}
		// An internal trigger's name holds an OID; its constraint names it instead, qualified by
		// the constraint's table where that is another one.
		f := Fact{Kind: "internal_triggers", Name: t.ConstraintName, Def: t.Enabled,
			why: fmt.Sprintf("the foreign key %s of %s.%s checks every delete and key update here, and fails them while rows refer",
				t.ConstraintName, t.ConstraintSchema, t.ConstraintTable)}
		switch {
		case t.ConstraintName == "":
			f.Name = "unowned"
		case t.ConstraintSchema != "control_core":
			f.Name = t.ConstraintSchema + "." + t.ConstraintTable + "." + t.ConstraintName
		case t.ConstraintTable != t.TableName:
			f.Name = t.ConstraintTable + "." + t.ConstraintName
		}
		if t.ConstraintSchema == "control_core" {
			f.ref = tableObject(t.ConstraintTable)
		}
		if t.ConstraintName != "" {
			f.remove = []string{fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT %s;",
				ident(t.ConstraintSchema)+"."+ident(t.ConstraintTable), ident(t.ConstraintName))}
		}
		add(t.TableName, f)
		add(t.TableName, Fact{Kind: "internal_trigger_definitions", Name: f.Name, Def: t.InternalDefinitions})
	}
	for _, p := range policies {
		add(p.TableName, Fact{Kind: "policy", Name: p.PolicyName, Def: p.Definition,
			why:    "a policy decides which rows statements see and may write, once row-level security is on",
			remove: []string{fmt.Sprintf("DROP POLICY %s ON %s;", ident(p.PolicyName), qualified(p.TableName))}})
	}
	for _, r := range rules {
		add(r.TableName, Fact{Kind: "rule", Name: r.RuleName, Def: r.Definition + " (enabled " + r.Enabled + ")",
			why:    "a rule rewrites every statement of its event on the table",
			remove: []string{fmt.Sprintf("DROP RULE %s ON %s;", ident(r.RuleName), qualified(r.TableName))}})
	}
	for _, i := range inheritance {
		noInherit := []string{fmt.Sprintf("ALTER TABLE %s.%s NO INHERIT %s.%s;",
			ident(i.ChildSchema), ident(i.ChildTable), ident(i.ParentSchema), ident(i.ParentTable))}
		if i.IsPartition { // PostgreSQL refuses NO INHERIT on a partition
			noInherit = []string{fmt.Sprintf("ALTER TABLE %s.%s DETACH PARTITION %s.%s;",
				ident(i.ParentSchema), ident(i.ParentTable), ident(i.ChildSchema), ident(i.ChildTable))}
		}
		why := "every statement on the parent reads, locks and changes the child's rows too"
		if i.ChildSchema == "control_core" {
			f := Fact{Kind: "inherits", Name: i.ParentSchema + "." + i.ParentTable, why: why, remove: noInherit}
			if i.ParentSchema == "control_core" {
				f.ref = tableObject(i.ParentTable)
			}
			add(i.ChildTable, f)
		}
		if i.ParentSchema == "control_core" {
			add(i.ParentTable, Fact{Kind: "inherited_by", Name: i.ChildSchema + "." + i.ChildTable, why: why, remove: noInherit})
		}
	}
	for _, p := range publications {
		add(p.TableName, publicationFact(p))
	}
	schema, err := readEnforcement(ctx, q, add)
	if err != nil {
		return nil, err
	}

	var facts []Fact
	for _, t := range tables {
		object := tableObject(t.TableName)
		onOff := func(b bool) string {
			if b {
				return "on"
			}
			return "off"
		}
		facts = append(facts,
			Fact{Object: object, Kind: "table", Def: "control_core." + t.TableName, inert: true},
			Fact{Object: object, Kind: "relkind", Def: t.Relkind},
			Fact{Object: object, Kind: "persistence", Def: t.Persistence},
			Fact{Object: object, Kind: "row_security", Def: onOff(t.RowSecurity)},
			Fact{Object: object, Kind: "force_row_security", Def: onOff(t.ForceRowSecurity)},
			Fact{Object: object, Kind: "replica_identity", Def: t.ReplicaIdentity})
		facts = append(facts, byTable[t.TableName]...)
	}
	for _, f := range functions {
		object := "function " + f.Signature
		facts = append(facts, Fact{Object: object, Kind: "function", Def: f.Signature, inert: true})
		for _, p := range [][2]string{
			{"arguments", f.Arguments}, {"returns", f.Result}, {"language", f.Language},
			{"volatility", f.Volatility}, {"parallel", f.Parallel}, {"security", f.Security},
			{"config", f.Config}, {"body", "sha256:" + f.BodySha256}, {"null_input", f.NullInput},
		} {
			facts = append(facts, Fact{Object: object, Kind: p[0], Def: p[1]})
		}
		facts = append(facts, Fact{Object: object, Kind: "owner", Def: f.Owner, ref: f.SchemaOwner})
	}
	facts = append(facts, schema...)
	for _, e := range eventTriggers {
		def := "ON " + e.Event
		if e.Tags != "" {
			def += " WHEN TAG IN (" + e.Tags + ")"
		}
		def += " EXECUTE FUNCTION " + e.Function + " enabled " + e.Enabled
		facts = append(facts, Fact{Object: databaseObject, Kind: "event_trigger", Name: e.Name, Def: def,
			inert:  e.Enabled == "disabled",
			why:    "an enabled event trigger runs its function inside migrations (and, on login, in every session)",
			remove: []string{fmt.Sprintf("ALTER EVENT TRIGGER %s DISABLE;", ident(e.Name))}})
	}
	return facts, nil
}

func tableObject(table string) string { return "table control_core." + table }

// ContractDrift reads the catalogs through q (which must run with search_path pg_catalog, so
// every name comes back schema-qualified as the contract writes it) and compares them with the
// contract.
func ContractDrift(ctx context.Context, conn dbconn.Querier, loc Locator) ([]Drift, error) {
	contract, err := Contract()
	if err != nil {
		return nil, err
	}
	facts, err := ReadFacts(ctx, conn)
	if err != nil {
		return nil, err
	}
	return Compare(contract, facts, loc), nil
}

// Compare lists what the catalogs (actual) lack or hold differently from the contract,
// and what they hold beyond it: as drift where it can change what a statement on a control_core
// table does (or what a migration does), else as a note. loc names the migration that defines
// a missing object, for the fix.
func Compare(contract, actual []Fact, loc Locator) []Drift {
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
	// Functions whose arguments or result differ: CREATE OR REPLACE cannot turn those back, so
	// none of their findings gets the migration's statement (it would fail, and the script with it).
	reshaped := map[string]bool{}
	for _, f := range contract {
		if got, ok := have[f.key()]; ok && (f.Kind == "arguments" || f.Kind == "returns") && got.Def != f.Def {
			reshaped[f.Object] = true
		}
	}
	var out, switches []Drift
	missingObject := map[string]bool{}
	internal := map[string][]internalChange{} // changed internal triggers, one finding per table
	var tablesOrder []string
	for _, f := range contract {
		if missingObject[f.Object] {
			continue // its header is reported missing; its properties would only repeat that
		}
		got, ok := have[f.key()]
		switch {
		case ok && got.Def == f.Def:
		case f.Kind == "table" || f.Kind == "function" || f.Kind == "schema":
			missingObject[f.Object] = true
			out = append(out, missingDrift(f, loc))
		case !ok && flagKinds[f.Kind]:
			// its table, index or constraint is missing (or renamed), and that finding says it
		case !ok && f.Kind == "trigger_enabled" && !hasKey(have, Fact{Object: f.Object, Kind: "trigger", Name: f.Name}):
			// the missing trigger says it
		case !ok:
			out = append(out, missingDrift(f, loc))
		case f.Kind == "owner" && loc.owner != "" && got.Def == loc.owner:
			// The function belongs to the owner role and the schema to another: the privileges
			// check names the schema's owner, and restoring it makes this fact hold again.
		case f.Kind == "internal_trigger_definitions":
			out = append(out, internalDefinitionsDrift(f, got, contract))
		case f.Kind == "constraint_index":
			// A constraint whose own definition differs is dropped and added again by its fix,
			// which rebuilds the index too.
			c := Fact{Object: f.Object, Kind: "constraint", Name: f.Name}
			if cgot, ok := have[c.key()]; ok && !constraintHolds(contract, c, cgot) {
				continue
			}
			switches = append(switches, constraintIndexDrift(f, got, contract))
		case flagKinds[f.Kind]:
			// first in the fix: a constraint added again by another finding's fix reads the
			// table, which fails while one of its switches is off (relispopulated, …)
			switches = append(switches, changedDrift(f, got, loc, false))
		case f.Kind == "internal_triggers":
			if internal[f.Object] == nil {
				tablesOrder = append(tablesOrder, f.Object)
			}
			internal[f.Object] = append(internal[f.Object], internalChange{f.Name, f.Def, got.Def})
		default:
			out = append(out, changedDrift(f, got, loc, reshaped[f.Object]))
		}
	}
	out = append(switches, out...)
	for _, object := range tablesOrder {
		out = append(out, internalDrift(object, internal[object]))
	}
	seen := map[string]bool{}
	for _, f := range actual {
		isHeader := f.Kind == "table" || f.Kind == "function" || f.Kind == "schema"
		switch {
		case want[f.key()]:
			continue // known
		case flagKinds[f.Kind]:
			continue // the switches of an index or constraint beyond the contract: the index or constraint says it
		case !isHeader && !listed[f.Object] && f.Object != databaseObject:
			continue // a property of an extra table or function: its header says it
		case f.Kind == "trigger_enabled" && !want[Fact{Object: f.Object, Kind: "trigger", Name: f.Name}.key()]:
			continue // the extra trigger says it
		case (f.Kind == "internal_triggers" || f.Kind == "inherits") && listed[f.ref]:
			continue // the other table is the contract's: its extra constraint or child says it
		}
		d := extraDrift(f)
		if !d.Note && len(d.SQL) > 0 && allSeen(seen, d.SQL) {
			continue // the same statements already remove it, under another finding
		}
		for _, s := range d.SQL {
			seen[s] = true
		}
		out = append(out, d)
	}
	return out
}

// constraintHolds says whether the constraint got reads as the contract's, or differs only in an
// invalid index (whose fix, REINDEX, keeps the index's columns).
func constraintHolds(contract []Fact, c, got Fact) bool {
	for _, f := range contract {
		if f.key() == c.key() {
			return got.Def == f.Def || got.Def == f.Def+" (index INVALID)"
		}
	}
	return true
}

func hasKey(have map[string]Fact, f Fact) bool { _, ok := have[f.key()]; return ok }

func allSeen(seen map[string]bool, stmts []string) bool {
	for _, s := range stmts {
		if !seen[s] {
			return false
		}
	}
	return true
}

// describe names an object the way a DBA looks it up.
func describe(f Fact) string {
	if f.Object == schemaObject { // the schema's other objects, by their qualified name
		return strings.TrimSuffix("control_core."+f.Name, ".")
	}
	table := strings.TrimPrefix(f.Object, "table ")
	switch f.Kind {
	case "column":
		return table + "." + f.Name
	case "constraint", "trigger", "trigger_enabled", "internal_triggers", "internal_trigger_definitions", "policy", "rule":
		return f.Name + " on " + table
	case "index", "index_flags":
		return "control_core." + f.Name
	case "constraint_flags", "constraint_index":
		return f.Name + " on " + table
	case "flags", "table", "relkind", "persistence", "row_security", "force_row_security", "replica_identity":
		return table
	case "inherits":
		return table + " inherits " + f.Name
	case "inherited_by":
		return f.Name + " inherits " + table
	case "event_trigger":
		return f.Name
	case "publication":
		return f.Name + " of " + table
	default: // function and its properties
		return strings.TrimPrefix(f.Object, "function ")
	}
}

func describeKind(f Fact) string {
	if f.Object == schemaObject {
		return strings.ReplaceAll(f.Kind, "_", " ") + " " + describe(f)
	}
	switch f.Kind {
	case "table", "column", "constraint", "index", "function", "trigger", "policy", "rule":
		return f.Kind + " " + describe(f)
	case "trigger_enabled":
		return "trigger " + describe(f)
	case "internal_triggers", "internal_trigger_definitions":
		return "the internal triggers of constraint " + describe(f)
	case "relkind", "persistence", "row_security", "force_row_security", "replica_identity", "inherits", "inherited_by", "flags":
		return "table " + describe(f)
	case "index_flags":
		return "index " + describe(f)
	case "constraint_flags", "constraint_index":
		return "constraint " + describe(f)
	case "event_trigger":
		return "event trigger " + describe(f)
	case "publication":
		return "publication " + describe(f)
	default:
		return "function " + describe(f)
	}
}

// extraDrift reports a fact beyond the contract: a note when it is inert, else drift with the
// statements that remove it.
func extraDrift(f Fact) Drift {
	d := Drift{Kind: "extra_" + f.Kind, Object: describe(f)}
	if f.inert {
		d.Note = true
		d.Message = fmt.Sprintf("%s is not in the readiness contract", describeKind(f))
		d.Fix = "none needed for readiness; if it belongs to control-core, add it with a migration and regenerate " + ContractFile
		switch f.Kind {
		case "event_trigger":
			d.Message = fmt.Sprintf("event trigger %s is disabled (an enabled one would be drift)", f.Name)
			d.Fix = "none needed; DROP EVENT TRIGGER it if nothing needs it"
		case "publication":
			d.Message = fmt.Sprintf("publication %s publishes table %s (%s): inert while the table keeps its replica identity, which the contract checks",
				ident(f.Name), strings.TrimPrefix(f.Object, "table "), f.Def)
			d.Fix = "none needed for readiness; if nothing replicates it, remove it: " + f.ref
		}
		return d
	}
	d.Message = fmt.Sprintf("%s is not in the readiness contract, and %s", describeKind(f), f.why)
	if f.why == "" {
		d.Message = fmt.Sprintf("%s is not in the readiness contract", describeKind(f))
	}
	d.SQL = f.remove
	switch {
	case f.Kind == "event_trigger":
		d.Message = fmt.Sprintf("event trigger %s (%s) is enabled: it runs inside every migration's DDL, and from PostgreSQL 17 a login one in every session", f.Name, f.Def)
		d.Fix = "disable it (" + strings.Join(d.SQL, " ") + "), or DROP EVENT TRIGGER it if nothing else needs it"
	case f.Kind == "column" && len(d.SQL) > 0:
		d.Fix = "make it inert, keeping its values (" + strings.Join(d.SQL, " ") + "), or drop it: ALTER TABLE " +
			qualified(strings.TrimPrefix(f.Object, "table control_core.")) + " DROP COLUMN " + ident(f.Name) + ";"
	case len(d.SQL) > 0:
		d.Fix = "remove it: " + strings.Join(d.SQL, " ")
	default:
		d.Fix = "remove it by hand; if it belongs to control-core, add it with a migration and regenerate " + ContractFile
	}
	return d
}

func missingDrift(f Fact, loc Locator) Drift {
	origin := loc.Origin(f)
	d := Drift{Kind: "missing_" + f.Kind, Object: describe(f),
		Message: fmt.Sprintf("%s is missing (contract: %s)", describeKind(f), strings.TrimSpace(f.Kind+" "+f.Name+" "+f.Def))}
	table := qualified(strings.TrimPrefix(f.Object, "table control_core."))
	switch f.Kind {
	case "index", "trigger":
		d.SQL = []string{f.Def + ";"}
	case "constraint":
		d.SQL = []string{fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s %s;", table, ident(f.Name), f.Def)}
	case "policy":
		d.SQL = []string{fmt.Sprintf("CREATE POLICY %s ON %s %s;", ident(f.Name), table, f.Def)}
	case "table", "function":
		d.Message = fmt.Sprintf("%s is missing", describeKind(f))
		d.Fix = "no safe statement restores it: recreate it as " + origin + " defines it, or restore the database from a backup"
	case "column":
		d.Fix = "no safe statement restores it (its values are gone): recreate it as " + origin + " defines it (" + f.Def +
			"), or restore the database from a backup"
	case "internal_triggers":
		d.Fix = "they come with their constraint: restore it as " + origin + " defines it"
	case "arguments", "returns", "language", "volatility", "parallel", "security", "config", "body", "null_input", "owner":
		d.Message = fmt.Sprintf("function %s lacks its %s (contract: %s)", describe(f), f.Kind, f.Def)
		d.Fix = "recreate the function as " + origin + " defines it"
	default:
		d.Fix = "restore it as " + origin + " defines it"
	}
	if len(d.SQL) > 0 {
		d.Fix = strings.Join(d.SQL, " ")
	}
	return d
}

// changedDrift reports a fact the catalogs hold otherwise than the contract. reshaped says the
// fact's function has other arguments or another result, which CREATE OR REPLACE cannot undo.
func changedDrift(want, got Fact, loc Locator, reshaped bool) Drift {
	origin := loc.Origin(want)
	d := Drift{Kind: "changed_" + want.Kind, Object: describe(want),
		Message: fmt.Sprintf("%s differs from the contract: want %q, have %q", describeKind(want), want.Def, got.Def)}
	tableName := strings.TrimPrefix(want.Object, "table control_core.")
	table := qualified(tableName)
	fn := strings.TrimPrefix(want.Object, "function ") // format('%I.%I(%s)'): already quoted by the server
	switch want.Kind {
	case "column":
		return columnDrift(d, want, got, origin)
	case "flags", "index_flags", "constraint_flags":
		return flagsDrift(d, want, got)
	case "sequence":
		if want.Object == schemaObject {
			return sequenceDrift(d, want, got)
		}
	case "constraint":
		if got.Def == want.Def+" (index INVALID)" {
			d.Message = fmt.Sprintf("constraint %s: its index is not valid, so the constraint enforces nothing", describe(want))
			d.SQL = []string{fmt.Sprintf("REINDEX INDEX %s;", qualified(want.Name))}
		} else if got.Def == want.Def+" NOT VALID" {
			d.Message = fmt.Sprintf("constraint %s is NOT VALID: rows written before it was added were never checked", describe(want))
			d.SQL = []string{fmt.Sprintf("ALTER TABLE %s VALIDATE CONSTRAINT %s;", table, ident(want.Name))}
		} else {
			d.SQL = []string{fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT %s, ADD CONSTRAINT %s %s;", table, ident(want.Name), ident(want.Name), want.Def)}
		}
	case "index":
		if got.Def == want.Def+" (INVALID)" {
			d.Message = fmt.Sprintf("index %s is not valid: no statement uses it", describe(want))
			d.SQL = []string{fmt.Sprintf("REINDEX INDEX %s;", qualified(want.Name))}
		} else {
			d.SQL = []string{fmt.Sprintf("DROP INDEX %s;", qualified(want.Name)), want.Def + ";"}
		}
	case "trigger":
		d.SQL = []string{fmt.Sprintf("DROP TRIGGER %s ON %s;", ident(want.Name), table), want.Def + ";"}
	case "trigger_enabled":
		if verb, ok := triggerEnable[want.Def]; ok {
			d.Message = fmt.Sprintf("trigger %s fires %s; the contract says %s", describe(want), enabledWords(got.Def), enabledWords(want.Def))
			d.SQL = []string{fmt.Sprintf("ALTER TABLE %s %s TRIGGER %s;", table, verb, ident(want.Name))}
		}
	case "policy":
		d.SQL = []string{fmt.Sprintf("DROP POLICY %s ON %s;", ident(want.Name), table),
			fmt.Sprintf("CREATE POLICY %s ON %s %s;", ident(want.Name), table, want.Def)}
	case "persistence":
		if verb, ok := map[string]string{"permanent": "SET LOGGED", "unlogged": "SET UNLOGGED"}[want.Def]; ok {
			d.Message = fmt.Sprintf("table %s is %s; the contract says %s (an unlogged table loses its rows in a crash and is not replicated)", describe(want), got.Def, want.Def)
			d.SQL = []string{fmt.Sprintf("ALTER TABLE %s %s;", table, verb)}
		}
	case "row_security", "force_row_security":
		verb := map[string]string{"row_security on": "ENABLE", "row_security off": "DISABLE",
			"force_row_security on": "FORCE", "force_row_security off": "NO FORCE"}[want.Kind+" "+want.Def]
		what := map[string]string{"row_security": "row-level security", "force_row_security": "forced row-level security"}[want.Kind]
		d.Message = fmt.Sprintf("table %s has %s %s; the contract says %s (with no policy that allows them, statements of non-owners see and change no row)",
			describe(want), what, got.Def, want.Def)
		d.SQL = []string{fmt.Sprintf("ALTER TABLE %s %s ROW LEVEL SECURITY;", table, verb)}
	case "replica_identity":
		if want.Def != "index" {
			d.SQL = []string{fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY %s;", table, strings.ToUpper(want.Def))}
		}
	case "relkind", "inherits", "inherited_by", "rule":
		// no statement turns them back safely: the object is recreated from its migration
	case "body", "language":
		if stmts, ok := loc.recreate(want.Object); ok && !reshaped {
			d.SQL = stmts
		}
	case "volatility", "parallel", "security", "null_input":
		attr := strings.ToUpper(want.Def)
		switch want.Kind {
		case "parallel":
			attr = "PARALLEL " + attr
		case "security":
			attr = "SECURITY " + attr
		}
		d.SQL = []string{fmt.Sprintf("ALTER FUNCTION %s %s;", fn, attr)}
	case "config":
		d.SQL = configSQL(fn, want.Def)
		if stmts, ok := loc.recreate(want.Object); ok && d.SQL == nil && !reshaped {
			d.SQL = stmts
		}
	case "owner":
		if want.Def == "schema owner" && got.ref != "" {
			d.Message = fmt.Sprintf("function %s is owned by %s, not by the owner of schema control_core (%s): it runs as its owner when SECURITY DEFINER, and its owner may change it",
				describe(want), got.Def, got.ref)
			// To the owner role the model names, never to whoever owns the schema now: a changed
			// schema owner is drift itself, and following it would hand the function over too.
			to := loc.owner
			if to == "" {
				to = got.ref
			}
			d.SQL = []string{fmt.Sprintf("ALTER FUNCTION %s OWNER TO %s;", fn, ident(to))}
		}
	}
	if strings.HasPrefix(want.Object, "function ") && want.Kind != "owner" {
		d.Message = fmt.Sprintf("function %s: its %s differs from the contract: want %q, have %q", describe(want), want.Kind, want.Def, got.Def)
	}
	switch {
	case len(d.SQL) == 1 && strings.HasPrefix(d.SQL[0], "CREATE "):
		d.Fix = "recreate the function as " + origin + " defines it: its CREATE FUNCTION statement run as CREATE OR REPLACE FUNCTION " +
			"(the statement in sql), which keeps its owner, its grants and what depends on it, and loses no data"
	case len(d.SQL) > 1 && strings.HasPrefix(d.SQL[0], "CREATE "):
		d.Fix = "recreate the function as " + origin + " defines it: its CREATE FUNCTION statement run as CREATE OR REPLACE FUNCTION, " +
			"then the later migrations' ALTER FUNCTION … SET statements that give it settings of its own (the statements in sql), " +
			"which keeps its owner, its grants and what depends on it, and loses no data"
	case len(d.SQL) > 0:
		d.Fix = strings.Join(d.SQL, " ")
	case reshaped || want.Kind == "arguments" || want.Kind == "returns":
		d.Fix = "no statement turns it back in place: CREATE OR REPLACE FUNCTION cannot change a function's argument names, " +
			"defaults or result, so DROP FUNCTION " + fn + " (its grants, and a trigger or default that uses it, go with it: CASCADE) " +
			"and CREATE FUNCTION it again as " + origin + " defines it, then restore its owner (ALTER FUNCTION … OWNER TO the schema's owner), " +
			"its grants (qlmigrate grants --sql) and what the drop cascaded to, as the migrations define them"
	case strings.HasPrefix(want.Object, "function "):
		d.Fix = "no safe statement turns it back: recreate the function as " + origin + " defines it (CREATE OR REPLACE FUNCTION)"
	default:
		d.Fix = "no safe statement turns it back: recreate it as " + origin + " defines it"
	}
	return d
}

// internalChange is one constraint whose internal triggers on a table fire otherwise than the
// contract says.
type internalChange struct{ name, want, got string }

// internalDrift reports a table's changed internal triggers at once: ALTER TABLE … DISABLE
// TRIGGER ALL (or session_replication_role tricks) touches them all, and one statement, as a
// superuser, turns them all back.
func internalDrift(object string, changes []internalChange) Drift {
	table := strings.TrimPrefix(object, "table ")
	var parts, names []string
	allOrigin := true
	for _, c := range changes {
		names = append(names, c.name)
		parts = append(parts, fmt.Sprintf("constraint %s: %s (contract: %s)", c.name, c.got, c.want))
		for _, s := range strings.Split(c.want, ", ") {
			allOrigin = allOrigin && s == "origin"
		}
	}
	d := Drift{Kind: "changed_internal_triggers", Object: strings.Join(names, ", ") + " on " + table,
		Message: fmt.Sprintf("on table %s the internal triggers that enforce foreign keys do not fire as the contract says, so their rows go unchecked: %s",
			table, strings.Join(parts, "; "))}
	if allOrigin {
		d.SQL = []string{fmt.Sprintf("ALTER TABLE %s ENABLE TRIGGER ALL;", qualified(strings.TrimPrefix(object, "table control_core.")))}
		d.Fix = d.SQL[0] + " (as a superuser; then check that no row broke the keys while they were off)"
	} else {
		d.Fix = "enable each of them as the contract says (ALTER TABLE … ENABLE TRIGGER …, as a superuser)"
	}
	return d
}

// Locator finds the migration that defines an object, for the fix of a missing one.
type Locator struct {
	migrations []checksums.Migration
	bodies     map[string]string
	owner      string // the owner role's name (WithOwner); "" means the schema's owner as read
}

// WithOwner returns l with the name of the owner role the model says owns control_core, which
// the fixes give a function back to. Without it a fix follows the schema's owner as read.
func (l Locator) WithOwner(role string) Locator {
	l.owner = role
	return l
}

// NewLocator reads the migrations of fsys (nil-safe: an empty Locator names no file).
func NewLocator(fsys fs.FS, migrations []checksums.Migration) Locator {
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
	if strings.HasPrefix(table, "goose_db_version") || strings.HasPrefix(f.Name, "goose_db_version") {
		return "goose's version table (the first `qlmigrate up` creates it)"
	}
	switch f.Kind {
	case "constraint", "index", "trigger", "trigger_enabled", "policy", "rule", "index_flags", "constraint_flags", "constraint_index":
		pattern = `\b` + regexp.QuoteMeta(f.Name) + `\b`
	case "table", "column", "relkind", "flags", "persistence", "row_security", "force_row_security", "replica_identity",
		"internal_triggers", "inherits", "inherited_by":
		pattern = `(?i)CREATE TABLE control_core\.` + regexp.QuoteMeta(table) + `\b`
	case "schema", "sequence", "view", "materialized_view", "foreign_table", "composite_type", "type", "operator", "collation":
		pattern = `\b` + regexp.QuoteMeta(f.Name) + `\b`
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
	if f.Kind == "constraint" || f.Kind == "trigger" || f.Kind == "trigger_enabled" { // an unnamed one: its table's migration
		return l.Origin(Fact{Object: f.Object, Kind: "table"})
	}
	return "the migrations"
}
