package readiness

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed" // the built-ins' contract
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/qlcontrol/controlcore/db"
	"github.com/qlcontrol/controlcore/internal/base/dbconn"
)

// The built-ins' contract: every function and operator initdb creates in pg_catalog, with the
// facts that decide what a call computes, as a fresh server of each supported major has them;
// and the operator families and classes, their operators and support functions (pg_amop,
// pg_amproc: what an index compares its keys with, so what a unique index lets in) and the
// built-in casts (pg_cast), keyed by access method, names, types and numbers, never by oid.
//
// Why every built-in and not a list of the ones control-core names: a list extracted from
// sql/migrations and sql/queries misses what those call indirectly (an operator's function, a
// cast's function, a type's input and output functions, what the planner's support functions and
// plpgsql's handler call), and grows stale with every query; a redefinition of any of them
// changes what a statement computes. Checking all of them costs one read of ~3,300 pg_proc rows
// and a contract file; it catches one nobody thought of. Facts are keyed by signature, not oid
// (what initdb creates after bootstrap gets oids that vary with the machine's locales), and by
// major version: each major adds and changes built-ins, while a minor release never changes the
// catalog's contents (that would take a catversion bump). A cluster upgraded by pg_upgrade has
// the new major's initdb catalog, so it matches too. Regenerate it on each major CI runs with
//
//	QL_PG_BIN=$(scripts/pg-bin.sh N) go test ./readiness -run TestBuiltinContractMatchesAFreshServer -update
//
// which replaces that major's lines and leaves the others.

//go:embed builtins_contract.txt
var builtinsText []byte

// BuiltinsFile is the built-ins' contract's file name, for messages.
const BuiltinsFile = "readiness/builtins_contract.txt"

// Builtin is one built-in function or operator: its signature and its facts, as key=value with
// the defaults left out (see builtinDefaults).
type Builtin struct {
	Kind      string // one of builtinKinds
	Signature string
	Facts     map[string]string
	oid       uint32
}

// builtinDefaults are the facts most built-ins share, left out of the contract's lines. src
// defaults to the function's name.
var builtinDefaults = map[string]string{
	"owner": "bootstrap", "language": "internal", "kind": "f", "volatility": "i", "parallel": "s", "strict": "true",
	"security_definer": "false", "leakproof": "false", "returns_set": "false", "variadic": "-", "support": "-",
	"all_arg_types": "-", "arg_modes": "-", "arg_names": "-", "nargdefaults": "0", "arg_defaults": "", "bin": "",
	"sql_body": "", "config": "",
	// operators
	"commutator": "0", "negator": "0",
	// operator classes and families' members, casts
	"keytype": "-", "purpose": "s", "sortfamily": "-", "same_method": "true",
}

// builtinKeys orders a line's facts.
var builtinKeys = []string{"owner", "language", "kind", "volatility", "parallel", "strict", "security_definer", "leakproof",
	"returns_set", "result", "variadic", "support", "all_arg_types", "arg_modes", "arg_names", "nargdefaults", "arg_defaults",
	"src", "bin", "sql_body", "config", "code", "commutator", "negator",
	"family", "intype", "keytype", "default", "member", "purpose", "sortfamily", "same_method", "function", "context", "method"}

// builtinKinds are the contract's kinds: pg_proc, pg_operator, pg_opfamily, pg_opclass, pg_amop,
// pg_amproc and pg_cast rows.
var builtinKinds = []string{"function", "operator", "opfamily", "opclass", "amop", "amproc", "cast"}

func (b Builtin) fact(k string) string {
	if v, ok := b.Facts[k]; ok {
		return v
	}
	if k == "src" && b.Kind == "function" {
		name, _, _ := strings.Cut(strings.TrimPrefix(b.Signature, "pg_catalog."), "(")
		return name
	}
	return builtinDefaults[k]
}

// line renders b's facts, defaults left out.
func (b Builtin) line() string {
	var parts []string
	for _, k := range builtinKeys {
		v, ok := b.Facts[k]
		if !ok || v == b.defaultOf(k) {
			continue
		}
		if v == "" || strings.ContainsAny(v, " \t\n\r\"\\=") || !strconv.CanBackquote(v) {
			v = strconv.Quote(v)
		}
		parts = append(parts, k+"="+v)
	}
	return strings.Join(parts, " ")
}

func (b Builtin) defaultOf(k string) string {
	c := b
	c.Facts = nil
	return c.fact(k)
}

func digest(s string) string {
	if s == "" {
		return ""
	}
	h := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(h[:])
}

// ReadBuiltins reads the server's built-ins. Node trees (argument defaults, SQL-standard bodies)
// are hashed here, not by the server: its sha256 is one of the functions checked.
func ReadBuiltins(ctx context.Context, conn dbconn.Querier) ([]Builtin, error) {
	q := db.New(conn)
	fns, err := q.BuiltinFunctions(ctx)
	if err != nil {
		return nil, fmt.Errorf("read built-in functions: %w", err)
	}
	ops, err := q.BuiltinOperators(ctx)
	if err != nil {
		return nil, fmt.Errorf("read built-in operators: %w", err)
	}
	owner := func(b bool) string {
		if b {
			return "bootstrap"
		}
		return "other"
	}
	out := make([]Builtin, 0, len(fns)+len(ops))
	for _, f := range fns {
		out = append(out, Builtin{Kind: "function", Signature: f.Signature, oid: f.Oid.Uint32, Facts: map[string]string{
			"owner": owner(f.BootstrapOwner), "language": f.Language, "kind": f.Kind, "volatility": f.Volatility,
			"parallel": f.Parallel, "strict": strconv.FormatBool(f.Strict), "security_definer": strconv.FormatBool(f.SecurityDefiner),
			"leakproof": strconv.FormatBool(f.Leakproof), "returns_set": strconv.FormatBool(f.ReturnsSet), "result": f.Result,
			"variadic": f.Variadic, "support": f.Support, "all_arg_types": f.AllArgTypes, "arg_modes": f.ArgModes,
			"arg_names": f.ArgNames, "nargdefaults": strconv.Itoa(int(f.Nargdefaults)), "arg_defaults": digest(f.ArgDefaults),
			"src": f.Src, "bin": f.Bin, "sql_body": digest(f.SqlBody), "config": f.Config,
		}})
	}
	for _, o := range ops {
		out = append(out, Builtin{Kind: "operator", Signature: o.Signature, oid: o.Oid.Uint32, Facts: map[string]string{
			"owner": owner(o.BootstrapOwner), "kind": o.Kind, "result": o.Result, "code": o.Code,
			"commutator": o.Commutator, "negator": o.Negator,
		}})
	}
	fams, err := q.BuiltinOpFamilies(ctx)
	if err != nil {
		return nil, fmt.Errorf("read built-in operator families and classes: %w", err)
	}
	for _, f := range fams {
		b := Builtin{Kind: f.Kind, Signature: f.Signature, oid: f.Oid.Uint32, Facts: map[string]string{"owner": owner(f.BootstrapOwner)}}
		if f.Kind == "opclass" {
			b.Facts["family"], b.Facts["intype"], b.Facts["keytype"] = f.Family, f.Intype, f.Keytype
			b.Facts["default"] = strconv.FormatBool(f.IsDefault)
		}
		out = append(out, b)
	}
	members, err := q.BuiltinFamilyMembers(ctx)
	if err != nil {
		return nil, fmt.Errorf("read built-in operator families' members: %w", err)
	}
	for _, m := range members {
		b := Builtin{Kind: m.Kind, Signature: m.Signature, oid: m.Oid.Uint32, Facts: map[string]string{"member": m.Member}}
		if m.Kind == "amop" {
			b.Facts["purpose"], b.Facts["sortfamily"] = m.Purpose, m.Sortfamily
			b.Facts["same_method"] = strconv.FormatBool(m.SameMethod)
		}
		out = append(out, b)
	}
	casts, err := q.BuiltinCasts(ctx)
	if err != nil {
		return nil, fmt.Errorf("read built-in casts: %w", err)
	}
	for _, c := range casts {
		out = append(out, Builtin{Kind: "cast", Signature: c.Signature, oid: c.Oid.Uint32, Facts: map[string]string{
			"function": c.Function, "context": c.Context, "method": c.Method}})
	}
	return out, nil
}

// builtinLine is one line of the contract: a built-in and the majors it holds for.
type builtinLine struct {
	b      Builtin
	majors []int
}

func parseBuiltins(text []byte) ([]builtinLine, error) {
	var out []builtinLine
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	n := 0
	for sc.Scan() {
		n++
		t := sc.Text()
		if strings.TrimSpace(t) == "" || strings.HasPrefix(t, "#") {
			continue
		}
		f := strings.Split(t, "\t")
		if len(f) != 4 || !slices.Contains(builtinKinds, f[0]) {
			return nil, fmt.Errorf("%s line %d: want KIND<TAB>SIGNATURE<TAB>MAJORS<TAB>FACTS", BuiltinsFile, n)
		}
		l := builtinLine{b: Builtin{Kind: f[0], Signature: f[1], Facts: map[string]string{}}}
		for _, m := range strings.Split(f[2], ",") {
			v, err := strconv.Atoi(m)
			if err != nil {
				return nil, fmt.Errorf("%s line %d: major %q: %w", BuiltinsFile, n, m, err)
			}
			l.majors = append(l.majors, v)
		}
		rest := f[3]
		for rest != "" {
			k, v, ok := strings.Cut(rest, "=")
			if !ok {
				return nil, fmt.Errorf("%s line %d: fact %q without =", BuiltinsFile, n, rest)
			}
			if strings.HasPrefix(v, `"`) {
				q, err := strconv.QuotedPrefix(v)
				if err != nil {
					return nil, fmt.Errorf("%s line %d: fact %s: %w", BuiltinsFile, n, k, err)
				}
				rest = strings.TrimPrefix(v[len(q):], " ")
				v, _ = strconv.Unquote(q)
			} else {
				v, rest, _ = strings.Cut(v, " ")
			}
			l.b.Facts[k] = v
		}
		out = append(out, l)
	}
	return out, sc.Err()
}

// contractLines parses the embedded contract once: verify runs on every `qlsched run` start.
var contractLines = sync.OnceValues(func() ([]builtinLine, error) { return parseBuiltins(builtinsText) })

// ContractBuiltins returns the built-ins' contract for major (nil when it has none).
func ContractBuiltins(major int) ([]Builtin, error) {
	lines, err := contractLines()
	if err != nil {
		return nil, err
	}
	var out []Builtin
	for _, l := range lines {
		if slices.Contains(l.majors, major) {
			out = append(out, l.b)
		}
	}
	return out, nil
}

// UpdateBuiltins returns the contract text with major's built-ins replaced by fresh: each line
// lists the majors whose fresh server has exactly those facts.
func UpdateBuiltins(text []byte, major int, fresh []Builtin) ([]byte, error) {
	lines, err := parseBuiltins(text)
	if err != nil {
		return nil, err
	}
	type key struct{ kind, sig, facts string }
	majors := map[key][]int{}
	add := func(b Builtin, m int) {
		k := key{b.Kind, b.Signature, b.line()}
		if !slices.Contains(majors[k], m) {
			majors[k] = append(majors[k], m)
		}
	}
	for _, l := range lines {
		for _, m := range l.majors {
			if m != major {
				add(l.b, m)
			}
		}
	}
	for _, b := range fresh {
		add(b, major)
	}
	keys := make([]key, 0, len(majors))
	for k := range majors {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		return strings.Compare(a.kind+"\t"+a.sig+"\t"+a.facts, b.kind+"\t"+b.sig+"\t"+b.facts)
	})
	var buf bytes.Buffer
	buf.WriteString(`# control-core built-ins contract: every function, operator, operator family and class (with their
# members) initdb creates in pg_catalog, and every built-in cast, with the facts that decide what a call or an index computes, per PostgreSQL major (readiness/builtins.go says why).
# KIND<TAB>SIGNATURE<TAB>MAJORS<TAB>FACTS; facts equal to the defaults in builtins.go are left out.
# Generated from a fresh server of each major:
#   QL_PG_BIN=$(scripts/pg-bin.sh N) go test ./readiness -run TestBuiltinContractMatchesAFreshServer -update
`)
	for _, k := range keys {
		ms := majors[k]
		slices.Sort(ms)
		strs := make([]string, len(ms))
		for i, m := range ms {
			strs[i] = strconv.Itoa(m)
		}
		fmt.Fprintf(&buf, "%s\t%s\t%s\t%s\n", k.kind, k.sig, strings.Join(strs, ","), k.facts)
	}
	return buf.Bytes(), nil
}

// BuiltinDrift compares the server's built-ins with the contract for its major: a built-in
// redefined (CREATE OR REPLACE FUNCTION pg_catalog.…, ALTER FUNCTION, UPDATE pg_proc or
// pg_operator), missing or renamed, and any function or operator created in pg_catalog since
// initdb, extensions' members aside (an extension is installed on purpose, and the casts check
// treats it so too).
func BuiltinDrift(ctx context.Context, conn dbconn.Querier) ([]Drift, error) {
	q := db.New(conn)
	major, err := q.BuiltinServerMajor(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the server's major version: %w", err)
	}
	want, err := ContractBuiltins(int(major))
	if err != nil {
		return nil, err
	}
	if len(want) == 0 {
		return []Drift{{Kind: "builtins_unchecked", Object: fmt.Sprintf("PostgreSQL %d", major), Note: true,
			Message: fmt.Sprintf("%s holds no built-ins for PostgreSQL %d: a redefined pg_catalog function is not detected", BuiltinsFile, major),
			Fix:     "use a control-core release that supports this major"}}, nil
	}
	have, err := ReadBuiltins(ctx, conn)
	if err != nil {
		return nil, err
	}
	extra, err := q.UserObjectsInCatalog(ctx)
	if err != nil {
		return nil, fmt.Errorf("read objects created in pg_catalog: %w", err)
	}
	out := CompareBuiltins(want, have)
	// Operators first: a fix that drops a function before the operator that calls it fails.
	slices.SortStableFunc(extra, func(a, b db.UserObjectsInCatalogRow) int {
		return boolRank(a.Kind == "function") - boolRank(b.Kind == "function")
	})
	for _, e := range extra {
		name := e.Name
		if !strings.HasPrefix(name, "pg_catalog.") {
			name = "pg_catalog." + name // rendered under search_path pg_catalog; the fix runs under any
		}
		stmt := fmt.Sprintf("DROP %s %s;", strings.ToUpper(e.Kind), name)
		out = append(out, Drift{Kind: "extra_builtin", Object: e.Kind + " " + name,
			Message: fmt.Sprintf("%s %s was created in pg_catalog, which every session searches first: it can take a call meant for a built-in", e.Kind, name),
			Fix:     "remove it: " + stmt, SQL: []string{stmt}})
	}
	return out, nil
}

// CompareBuiltins lists the built-ins have lacks, holds otherwise than want, or holds beyond it.
func CompareBuiltins(want, have []Builtin) []Drift {
	byKey := make(map[string]Builtin, len(have))
	for _, b := range have {
		byKey[b.Kind+" "+b.Signature] = b
	}
	var out []Drift
	for _, w := range want {
		k := w.Kind + " " + w.Signature
		h, ok := byKey[k]
		delete(byKey, k)
		if !ok {
			out = append(out, Drift{Kind: "missing_builtin", Object: w.Signature,
				Message: fmt.Sprintf("built-in %s %s is missing (dropped or renamed)", kindName[w.Kind], w.Signature),
				Fix:     "no statement restores a built-in in general: restore the database from a fresh cluster of this major (pg_dump of control-core's data into it, or pg_upgrade)"})
			continue
		}
		var diffs []string
		for _, f := range builtinKeys {
			if w.fact(f) != h.fact(f) {
				diffs = append(diffs, f)
			}
		}
		if len(diffs) == 0 {
			continue
		}
		var parts []string
		for _, f := range diffs {
			parts = append(parts, fmt.Sprintf("%s %q (a fresh server: %q)", f, abbreviate(h.fact(f)), abbreviate(w.fact(f))))
		}
		d := Drift{Kind: "changed_builtin", Object: w.Signature,
			Message: fmt.Sprintf("built-in %s %s is not what a fresh PostgreSQL server has: %s; every statement that calls it computes something else",
				kindName[w.Kind], w.Signature, strings.Join(parts, "; "))}
		if stmt, ok := restoreBuiltin(w, h, diffs); ok {
			d.SQL = []string{stmt}
			d.Fix = "restore its catalog row as a fresh server has it (as a superuser): " + stmt
		} else {
			d.Fix = "no statement restores this built-in's definition: restore the database from a fresh cluster of this major " +
				"(pg_dump of control-core's data into it, or pg_upgrade), or copy the row's facts from one by hand"
		}
		out = append(out, d)
	}
	rest := make([]string, 0, len(byKey))
	for k := range byKey {
		rest = append(rest, k)
	}
	slices.Sort(rest)
	for _, k := range rest {
		b := byKey[k]
		if stmt, ok := dropAdded(b); ok {
			out = append(out, Drift{Kind: "extra_builtin", Object: b.Kind + " " + b.Signature,
				Message: fmt.Sprintf("%s %s was added to pg_catalog after initdb: the planner and every index on its types use what an operator family holds", kindName[b.Kind], b.Signature),
				Fix:     "remove it: " + stmt, SQL: []string{stmt}})
			continue
		}
		out = append(out, Drift{Kind: "unknown_builtin", Object: b.Signature,
			Message: fmt.Sprintf("pg_catalog holds %s %s from initdb (oid %d) that a fresh server of this major does not: a built-in renamed or re-typed", kindName[b.Kind], b.Signature, b.oid),
			Fix:     "no statement restores it in general: restore the database from a fresh cluster of this major"})
	}
	return out
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

var kindName = map[string]string{"function": "function", "operator": "operator", "opfamily": "operator family",
	"opclass": "operator class", "amop": "operator family member", "amproc": "operator family support function", "cast": "cast"}

// dropAdded returns the statement that removes an operator family, class or family member
// created after initdb (oid 16384 on), keyed as ReadBuiltins keys them.
func dropAdded(b Builtin) (string, bool) {
	if b.oid < 16384 {
		return "", false
	}
	switch b.Kind {
	case "opfamily", "opclass": // "pg_catalog.NAME USING AM"
		name, am, ok := strings.Cut(strings.TrimPrefix(b.Signature, "pg_catalog."), " USING ")
		if !ok {
			return "", false
		}
		what := map[string]string{"opfamily": "FAMILY", "opclass": "CLASS"}[b.Kind]
		return fmt.Sprintf("DROP OPERATOR %s pg_catalog.%s USING %s;", what, identQ(name), identQ(am)), true
	case "amop", "amproc": // "pg_catalog.NAME USING AM: OPERATOR|FUNCTION N (L,R)"
		fam, member, ok := strings.Cut(strings.TrimPrefix(b.Signature, "pg_catalog."), ": ")
		name, am, ok2 := strings.Cut(fam, " USING ")
		if !ok || !ok2 {
			return "", false
		}
		return fmt.Sprintf("ALTER OPERATOR FAMILY pg_catalog.%s USING %s DROP %s;", identQ(name), identQ(am), member), true
	}
	return "", false
}

// identQ quotes a name for a statement.
func identQ(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func abbreviate(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}

// restoreBuiltin returns the UPDATE of the catalog row that gives h the facts of w, if every
// differing fact can be written back from its text (node trees and argument arrays cannot).
func restoreBuiltin(w, h Builtin, diffs []string) (string, bool) {
	lit := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	regOr0 := func(v, typ string) string {
		if v == "-" || v == "0" {
			return "0"
		}
		if typ != "regtype" && !strings.Contains(v, ".") {
			v = "pg_catalog." + v // rendered under search_path pg_catalog; the fix runs under any
		}
		return lit(v) + "::pg_catalog." + typ
	}
	var sets []string
	for _, f := range diffs {
		v := w.fact(f)
		var set string
		switch f {
		case "owner":
			if v != "bootstrap" {
				return "", false
			}
			col, ok := map[string]string{"function": "proowner", "operator": "oprowner", "opfamily": "opfowner", "opclass": "opcowner"}[w.Kind]
			if !ok {
				return "", false
			}
			set = col + " = 10"
		case "language":
			set = "prolang = (SELECT l.oid FROM pg_catalog.pg_language l WHERE l.lanname = " + lit(v) + ")"
		case "kind":
			if w.Kind == "operator" {
				set = "oprkind = " + lit(v)
			} else {
				set = "prokind = " + lit(v)
			}
		case "volatility":
			set = "provolatile = " + lit(v)
		case "parallel":
			set = "proparallel = " + lit(v)
		case "strict":
			set = "proisstrict = " + v
		case "security_definer":
			set = "prosecdef = " + v
		case "leakproof":
			set = "proleakproof = " + v
		case "returns_set":
			set = "proretset = " + v
		case "result":
			if w.Kind == "operator" {
				set = "oprresult = " + lit(v) + "::pg_catalog.regtype"
			} else {
				set = "prorettype = " + lit(v) + "::pg_catalog.regtype"
			}
		case "variadic":
			set = "provariadic = " + regOr0(v, "regtype")
		case "support":
			set = "prosupport = " + regOr0(v, "regprocedure")
		case "src":
			set = "prosrc = " + lit(v)
		case "bin":
			if v == "" {
				set = "probin = NULL"
			} else {
				set = "probin = " + lit(v)
			}
		case "code":
			set = "oprcode = " + regOr0(v, "regprocedure")
		case "commutator":
			set = "oprcom = " + regOr0(v, "regoperator")
		case "negator":
			set = "oprnegate = " + regOr0(v, "regoperator")
		case "sql_body", "arg_defaults", "config", "all_arg_types", "arg_modes", "arg_names":
			if v != "" && v != "-" {
				return "", false // a node tree or an array: no input function writes it back
			}
			set = map[string]string{"sql_body": "prosqlbody", "arg_defaults": "proargdefaults", "config": "proconfig",
				"all_arg_types": "proallargtypes", "arg_modes": "proargmodes", "arg_names": "proargnames"}[f] + " = NULL"
		case "nargdefaults":
			set = "pronargdefaults = " + v
		case "intype":
			set = "opcintype = " + lit(v) + "::pg_catalog.regtype"
		case "keytype":
			set = "opckeytype = " + regOr0(v, "regtype")
		case "default":
			set = "opcdefault = " + v
		case "family":
			name, ok := strings.CutPrefix(v, "pg_catalog.")
			if !ok {
				return "", false
			}
			set = fmt.Sprintf("opcfamily = (SELECT f.oid FROM pg_catalog.pg_opfamily f WHERE f.opfnamespace = 'pg_catalog'::pg_catalog.regnamespace"+
				" AND f.opfname = %s AND f.opfmethod = opcmethod)", lit(name))
		case "member":
			if w.Kind == "amop" {
				set = "amopopr = " + regOr0(v, "regoperator")
			} else {
				set = "amproc = " + regOr0(v, "regprocedure")
			}
		case "purpose":
			set = "amoppurpose = " + lit(v)
		case "sortfamily":
			if v != "-" {
				return "", false
			}
			set = "amopsortfamily = 0"
		case "same_method":
			set = "amopmethod = (SELECT f.opfmethod FROM pg_catalog.pg_opfamily f WHERE f.oid = amopfamily)"
		case "function":
			set = "castfunc = " + regOr0(v, "regprocedure")
		case "context":
			set = "castcontext = " + lit(v)
		case "method":
			set = "castmethod = " + lit(v)
		default:
			return "", false
		}
		sets = append(sets, set)
	}
	table := map[string]string{"function": "pg_proc", "operator": "pg_operator", "opfamily": "pg_opfamily", "opclass": "pg_opclass",
		"amop": "pg_amop", "amproc": "pg_amproc", "cast": "pg_cast"}[w.Kind]
	return fmt.Sprintf("UPDATE pg_catalog.%s SET %s WHERE oid = %d;", table, strings.Join(sets, ", "), h.oid), true
}
