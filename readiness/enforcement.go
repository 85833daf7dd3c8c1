package readiness

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/qlcontrol/controlcore/db"
)

// What the catalogs enforce beside the definitions (issue 30, point 1): the switches of
// pg_class, pg_index and pg_constraint that no rendering (pg_get_indexdef,
// pg_get_constraintdef, …) shows, read as one fact per object (kind flags, index_flags,
// constraint_flags) whose definition is "name=value …" in a fixed order. A switch that differs
// from a fresh migration's is drift, with the statement that turns it back; and the rest of
// schema control_core (point 4): every object that is neither a table nor a function, under
// the header "schema control_core".

// schemaObject is the Object of the schema's other objects (sequences, views, types, …).
const schemaObject = "schema control_core"

// flagKinds are the facts of switches and of what a constraint's index and internal triggers
// enforce: their object (table, index, constraint) reports itself when it is missing or extra,
// so such a fact never does.
var flagKinds = map[string]bool{"flags": true, "index_flags": true, "constraint_flags": true,
	"internal_trigger_definitions": true, "constraint_index": true}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func flagsDef(pairs ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(pairs[i] + "=" + pairs[i+1])
	}
	return b.String()
}

// readEnforcement reads the switches of every table, index and constraint of control_core, and
// every other object of the schema.
func readEnforcement(ctx context.Context, q *db.Queries, add func(table string, f Fact)) ([]Fact, error) {
	rels, err := q.ReadinessRelationFlags(ctx)
	if err != nil {
		return nil, fmt.Errorf("read table flags: %w", err)
	}
	indexes, err := q.ReadinessIndexFlags(ctx)
	if err != nil {
		return nil, fmt.Errorf("read index flags: %w", err)
	}
	keyIndexes, err := q.ReadinessConstraintIndexes(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the indexes of constraints: %w", err)
	}
	constraints, err := q.ReadinessConstraintFlags(ctx)
	if err != nil {
		return nil, fmt.Errorf("read constraint flags: %w", err)
	}
	others, err := q.ReadinessSchemaObjects(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the schema's other objects: %w", err)
	}
	for _, r := range rels {
		add(r.TableName, Fact{Kind: "flags", Def: flagsDef(
			"relhasindex", r.Relhasindex, "relchecks", r.Relchecks, "relhastriggers", r.Relhastriggers,
			"relhasrules", r.Relhasrules, "relhassubclass", r.Relhassubclass, "relnatts", r.Relnatts, "atthasdef", r.Atthasdef,
			"relisshared", onOff(r.Relisshared), "relispopulated", onOff(r.Relispopulated),
			"relispartition", onOff(r.Relispartition), "am", r.AccessMethod, "of", r.OfType)})
	}
	// After the table's flags and before the indexes' (their order in the contract is the order
	// of the fixes): a key added again reads the table, and the index's REINDEX needs its columns.
	for _, k := range keyIndexes {
		add(k.TableName, Fact{Kind: "constraint_index", Name: k.ConstraintName, Def: k.Definition, ref: k.ReferencedBy})
	}
	for _, i := range indexes {
		add(i.TableName, Fact{Kind: "index_flags", Name: i.IndexName, Def: flagsDef(
			"indisunique", onOff(i.IsUnique), "indnullsnotdistinct", onOff(i.NullsNotDistinct),
			"indisprimary", onOff(i.IsPrimary), "indisexclusion", onOff(i.IsExclusion),
			"indimmediate", onOff(i.IsImmediate), "indisreplident", onOff(i.IsReplident))})
	}
	for _, c := range constraints {
		add(c.TableName, Fact{Kind: "constraint_flags", Name: c.ConstraintName, Def: flagsDef(
			"conislocal", onOff(c.IsLocal), "coninhcount", fmt.Sprint(c.InheritedCount))})
	}
	// The schema's header is always there, so that an object beyond the contract is a finding
	// under a listed object, whatever the contract holds.
	facts := []Fact{{Object: schemaObject, Kind: "schema", Def: "control_core", inert: true}}
	for _, o := range others {
		// Beyond the contract each is a note: none of them changes what a statement on a table
		// of control_core does (the sessions' search_path is pg_catalog, so an operator or type
		// here is not found by name), and a migration that needs one adds it to the contract.
		facts = append(facts, Fact{Object: schemaObject, Kind: o.Kind, Name: o.Name, Def: o.Definition, inert: true})
	}
	return facts, nil
}

// parseFlags reads a flags fact's definition.
func parseFlags(def string) (names []string, values map[string]string) {
	values = map[string]string{}
	for _, p := range strings.Fields(def) {
		k, v, _ := strings.Cut(p, "=")
		names = append(names, k)
		values[k] = v
	}
	return names, values
}

// flagEffect says what a switch that differs from the contract does.
var flagEffect = map[string]string{
	"relhasindex":         "no write maintains the table's indexes, so no unique key or exclusion is checked and the indexes miss rows",
	"relchecks":           "the table's CHECK constraints are not all evaluated (the count disagrees with pg_constraint)",
	"relhastriggers":      "none of the table's triggers fires, the foreign keys' among them",
	"relhasrules":         "the table's rules do not rewrite statements",
	"relhassubclass":      "statements on the table do not reach its children",
	"relnatts":            "the column count disagrees with pg_attribute, so statements on the table fail",
	"relisshared":         "the table is taken for a cluster-wide catalog",
	"relispopulated":      "the table is taken for an unpopulated materialized view",
	"relispartition":      "the table is taken for a partition",
	"am":                  "its rows are stored by another access method",
	"of":                  "its columns follow a composite type's",
	"atthasdef":           "an INSERT that omits these columns writes NULL (or the default) although pg_attrdef holds (or lacks) their default",
	"indisunique":         "a second row with the same key is admitted",
	"indnullsnotdistinct": "NULLs compare otherwise in the unique check",
	"indisprimary":        "the table's primary key (and the default replica identity) is another",
	"indisexclusion":      "the exclusion check is skipped or added",
	"indimmediate":        "the unique check waits for a recheck that a NOT DEFERRABLE key never runs, so duplicates are admitted",
	"indisreplident":      "logical replication identifies rows by another index",
	"conislocal":          "the constraint is taken for one inherited from a parent",
	"coninhcount":         "the constraint is taken for one inherited from a parent, so DROP CONSTRAINT (a migration's) fails",
}

// indexChecks are the index switches whose change may have let rows in that the index should
// have refused: REINDEX rebuilds it and fails on them.
var indexChecks = map[string]bool{"indisunique": true, "indnullsnotdistinct": true, "indisexclusion": true, "indimmediate": true}

// flagsDrift reports a flags fact that differs: each switch with what it does, and the
// statements that turn them back. A switch no DDL sets (relchecks, relnatts, an index's
// uniqueness or immediacy, …) is turned back by the catalog UPDATE that changed it, scoped to
// the one object; the rest by DDL (REINDEX TABLE sets relhasindex, creating and dropping a
// trigger or rule sets relhastriggers or relhasrules).
func flagsDrift(d Drift, want, got Fact) Drift {
	table := strings.TrimPrefix(want.Object, "table control_core.")
	qt := qualified(table)
	regTable := lit(qt) + "::pg_catalog.regclass"
	names, wantV := parseFlags(want.Def)
	_, gotV := parseFlags(got.Def)
	var parts, sql, sets []string
	catalogOnly, reindex := false, false
	for _, n := range names {
		w, g := wantV[n], gotV[n]
		if w == g {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s is %s, the contract says %s: %s", n, g, w, flagEffect[n]))
		switch want.Kind + " " + n {
		case "flags relhasindex":
			sql = append(sql, fmt.Sprintf("REINDEX TABLE %s;", qt))
		case "flags relhastriggers":
			sql = append(sql, fmt.Sprintf("CREATE TRIGGER ql_restore_relhastriggers BEFORE UPDATE ON %s FOR EACH ROW EXECUTE FUNCTION pg_catalog.suppress_redundant_updates_trigger();", qt),
				fmt.Sprintf("DROP TRIGGER ql_restore_relhastriggers ON %s;", qt))
		case "flags relhasrules":
			sql = append(sql, fmt.Sprintf("CREATE RULE ql_restore_relhasrules AS ON INSERT TO %s DO ALSO NOTHING;", qt),
				fmt.Sprintf("DROP RULE ql_restore_relhasrules ON %s;", qt))
		case "flags relhassubclass":
			catalogOnly = true
			sql = append(sql, fmt.Sprintf("UPDATE pg_catalog.pg_class SET relhassubclass = true WHERE oid = %s;", regTable))
		case "flags relchecks":
			catalogOnly = true
			sql = append(sql, fmt.Sprintf("UPDATE pg_catalog.pg_class SET relchecks = (SELECT count(*) FROM pg_catalog.pg_constraint WHERE conrelid = %s AND contype = 'c') WHERE oid = %s;", regTable, regTable))
		case "flags relnatts":
			catalogOnly = true
			sql = append(sql, fmt.Sprintf("UPDATE pg_catalog.pg_class SET relnatts = (SELECT max(attnum) FROM pg_catalog.pg_attribute WHERE attrelid = %s AND attnum > 0) WHERE oid = %s;", regTable, regTable))
		case "flags atthasdef":
			catalogOnly = true
			sql = append(sql, fmt.Sprintf("UPDATE pg_catalog.pg_attribute a SET atthasdef = EXISTS (SELECT 1 FROM pg_catalog.pg_attrdef d WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum) WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped;", regTable))
		case "flags relisshared", "flags relispopulated", "flags relispartition":
			catalogOnly = true
			sql = append(sql, fmt.Sprintf("UPDATE pg_catalog.pg_class SET %s = %s WHERE oid = %s;", n, boolLit(w), regTable))
		case "flags am":
			if w != "-" {
				sql = append(sql, fmt.Sprintf("ALTER TABLE %s SET ACCESS METHOD %s;", qt, ident(w)))
			}
		case "flags of":
			if w == "-" {
				sql = append(sql, fmt.Sprintf("ALTER TABLE %s NOT OF;", qt))
			} else {
				sql = append(sql, fmt.Sprintf("ALTER TABLE %s OF %s;", qt, w))
			}
		case "index_flags indisunique", "index_flags indnullsnotdistinct", "index_flags indisprimary",
			"index_flags indisexclusion", "index_flags indimmediate", "index_flags indisreplident":
			catalogOnly = true
			sets = append(sets, n+" = "+boolLit(w))
			reindex = reindex || indexChecks[n]
		case "constraint_flags conislocal":
			catalogOnly = true
			sets = append(sets, n+" = "+boolLit(w))
		case "constraint_flags coninhcount":
			catalogOnly = true
			sets = append(sets, n+" = "+w)
		}
	}
	switch want.Kind {
	case "index_flags":
		d.Message = fmt.Sprintf("index %s does not enforce what the contract says: %s", describe(want), strings.Join(parts, "; "))
		if len(sets) > 0 {
			sql = append(sql, fmt.Sprintf("UPDATE pg_catalog.pg_index SET %s WHERE indexrelid = %s::pg_catalog.regclass;",
				strings.Join(sets, ", "), lit(qualified(want.Name))))
		}
		if reindex {
			sql = append(sql, fmt.Sprintf("REINDEX INDEX %s;", qualified(want.Name)))
		}
	case "constraint_flags":
		d.Message = fmt.Sprintf("constraint %s is not what the contract says: %s", describe(want), strings.Join(parts, "; "))
		if len(sets) > 0 {
			sql = append(sql, fmt.Sprintf("UPDATE pg_catalog.pg_constraint SET %s WHERE conrelid = %s AND conname = %s;",
				strings.Join(sets, ", "), regTable, lit(want.Name)))
		}
	default:
		d.Message = fmt.Sprintf("table %s does not enforce what the contract says: %s", describe(want), strings.Join(parts, "; "))
	}
	d.SQL = sql
	if len(sql) > 0 {
		d.Fix = strings.Join(sql, " ")
		if catalogOnly {
			d.Fix = "as a superuser (no DDL sets this switch; the catalog update turns back the one that changed it): " + d.Fix
		}
		if reindex || strings.HasPrefix(sql[0], "REINDEX TABLE") {
			d.Fix += " (REINDEX rebuilds the index from the rows and fails if rows written meanwhile break a key: remove those first)"
		}
	}
	return d
}

// internalDefinitionsDrift reports the internal triggers of a constraint (a foreign key's) that
// fire otherwise than the contract says (other events, function or deferrability): the
// constraint dropped and added again, as the contract defines it, gets its triggers back.
func internalDefinitionsDrift(want, got Fact, contract []Fact) Drift {
	d := Drift{Kind: "changed_internal_trigger_definitions", Object: describe(want),
		Message: fmt.Sprintf("the internal triggers of constraint %s do not fire as the contract says, so the key is checked otherwise than its definition reads: want %q, have %q",
			describe(want), want.Def, got.Def)}
	// The Name is the constraint, "table.constraint" when it is another table's, or
	// "schema.table.constraint" outside control_core (no fix from here).
	object, name := want.Object, want.Name
	if table, c, ok := strings.Cut(want.Name, "."); ok {
		if strings.Contains(c, ".") {
			d.Fix = "drop and add the constraint " + want.Name + " again, as its own schema defines it"
			return d
		}
		object, name = tableObject(table), c
	}
	for _, f := range contract {
		if f.Object == object && f.Kind == "constraint" && f.Name == name {
			table := qualified(strings.TrimPrefix(object, "table control_core."))
			d.SQL = []string{fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT %s, ADD CONSTRAINT %s %s;", table, ident(name), ident(name), f.Def)}
			d.Fix = d.SQL[0] + " (as a superuser; it checks every row again)"
			return d
		}
	}
	d.Fix = "drop and add the constraint " + want.Name + " again, as the migrations define it"
	return d
}

// keyColumns matches a plain key's definition, the only kind whose index a catalog UPDATE can
// turn back from the column names alone.
var keyColumns = regexp.MustCompile(`^(?:PRIMARY KEY|UNIQUE(?: NULLS NOT DISTINCT)?) \(([^()]+)\)$`)

// indexName reads the index's name from pg_get_indexdef's rendering.
var indexName = regexp.MustCompile(`^CREATE (?:UNIQUE )?INDEX (\S+) ON `)

// constraintIndexDrift reports a key whose index checks otherwise than the constraint reads
// (pg_index's indkey, indclass, … changed under it). The constraint's definition in the contract
// is the truth: the constraint dropped and added again gets its index back. A key that foreign
// keys reference cannot be dropped, so its index's columns are turned back in pg_index, by the
// contract's column names, and the index is rebuilt.
func constraintIndexDrift(want, got Fact, contract []Fact) Drift {
	table := strings.TrimPrefix(want.Object, "table control_core.")
	qt := qualified(table)
	d := Drift{Kind: "changed_constraint_index", Object: describe(want),
		Message: fmt.Sprintf("the index of constraint %s checks otherwise than the constraint reads, so writes are checked on other terms: want %q, have %q",
			describe(want), want.Def, got.Def)}
	def := ""
	for _, f := range contract {
		if f.Object == want.Object && f.Kind == "constraint" && f.Name == want.Name {
			def = f.Def
		}
	}
	switch m := keyColumns.FindStringSubmatch(def); {
	case def == "":
		d.Fix = "drop and add the constraint " + want.Name + " again, as the migrations define it"
	case got.ref == "":
		d.SQL = []string{fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT %s, ADD CONSTRAINT %s %s;", qt, ident(want.Name), ident(want.Name), def)}
		d.Fix = d.SQL[0] + " (as a superuser; it checks every row again)"
	case m != nil:
		var names []string
		for _, c := range strings.Split(m[1], ", ") {
			names = append(names, lit(unquoteIdent(c)))
		}
		idx := qualified(want.Name)
		if n := indexName.FindStringSubmatch(want.Def); n != nil {
			idx = "control_core." + n[1]
		}
		regTable := lit(qt) + "::pg_catalog.regclass"
		d.SQL = []string{
			fmt.Sprintf("UPDATE pg_catalog.pg_index SET indkey = (SELECT pg_catalog.string_agg(a.attnum::text, ' ' ORDER BY k.ord) FROM pg_catalog.unnest(ARRAY[%s]::text[]) WITH ORDINALITY AS k(name, ord) JOIN pg_catalog.pg_attribute a ON a.attrelid = %s AND a.attname = k.name)::pg_catalog.int2vector WHERE indexrelid = (SELECT conindid FROM pg_catalog.pg_constraint WHERE conrelid = %s AND conname = %s);",
				strings.Join(names, ", "), regTable, regTable, lit(want.Name)),
			fmt.Sprintf("REINDEX INDEX %s;", idx)}
		d.Fix = "as a superuser (foreign keys depend on the key, " + got.ref + ", so it cannot be dropped and added again; the catalog update turns back the index's columns from the constraint's): " +
			strings.Join(d.SQL, " ") + " (REINDEX rebuilds the index from the rows and fails if rows written meanwhile break the key: remove those first)"
	default:
		d.Fix = "drop the foreign keys that reference it (" + got.ref + "), drop and add the constraint " + want.Name + " again (" + def + "), and add the foreign keys again, as the contract defines them"
	}
	return d
}

// unquoteIdent reads an identifier as the server renders it (quoted when it must be).
func unquoteIdent(s string) string {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return strings.ReplaceAll(s[1:len(s)-1], `""`, `"`)
	}
	return s
}

// sequenceDrift turns a sequence's parameters back (ALTER SEQUENCE keeps its current value).
func sequenceDrift(d Drift, want, got Fact) Drift {
	wantParams, wantOwned, _ := strings.Cut(want.Def, " OWNED BY ")
	_, gotOwned, _ := strings.Cut(got.Def, " OWNED BY ")
	d.Object = "control_core." + want.Name
	d.Message = fmt.Sprintf("sequence %s differs from the contract: want %q, have %q", d.Object, want.Def, got.Def)
	if wantOwned == gotOwned {
		d.SQL = []string{fmt.Sprintf("ALTER SEQUENCE %s %s;", qualified(want.Name), wantParams)}
		d.Fix = d.SQL[0]
	}
	return d
}

func lit(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func boolLit(onOrOff string) string {
	if onOrOff == "on" {
		return "true"
	}
	return "false"
}
