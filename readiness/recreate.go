package readiness

import (
	"strings"

	"github.com/qlcontrol/controlcore/internal/base/sqlfile"
)

// A function's body, language or settings turn back without losing anything by running its
// CREATE FUNCTION statement again as CREATE OR REPLACE FUNCTION: that keeps its owner, its
// grants and what depends on it (the trigger that calls it, the defaults that call it), and sets
// every attribute the statement names (an attribute it does not name goes back to its default,
// as the migration left it). CREATE OR REPLACE cannot change the argument names or the return
// type, so a function whose arguments or result differ is not recreated this way.

// recreate returns the CREATE OR REPLACE FUNCTION statement of the migration that defines the
// function of object ("function control_core.lock_project(text, text)"): the last statement of
// the stream that creates a function of that name in control_core, exactly as written there (its
// leading comments left out), followed by the ALTER FUNCTION … SET/RESET statements of later
// migrations that give it settings of its own (pg-0029's planner settings of claim_due and
// admit), as written there: CREATE OR REPLACE resets every setting it does not name, so they
// follow it. A later CREATE OR REPLACE FUNCTION with the same argument list
// redefines it (pg-0019 makes lock_project SECURITY DEFINER so) and is the statement from then on.
// Only statements with the object's number of arguments count, so overloads by arity (pg-0022's
// 7-argument task_digest beside pg-0004's 4-argument one) are told apart.
// ok is false where no migration creates it, where its name is created more than once with
// different text otherwise (an overload of the same arity, or a plain CREATE this would not tell
// apart), or where a
// statement after it alters it otherwise than its settings, renames or drops it: then running the
// statements again would not give the function the migrations leave.
func (l Locator) recreate(object string) (stmts []string, ok bool) {
	name, ok := functionName(object)
	if !ok {
		return nil, false
	}
	arity := objectArity(object)
	altered, args, stmt := false, "", ""
	var settings []string
	for _, m := range l.migrations {
		body, found := l.bodies[m.File]
		if !found {
			continue
		}
		file, err := sqlfile.Parse(body)
		if err != nil {
			return nil, false
		}
		for _, st := range file.Up {
			for _, toks := range statements(st.Tokens) {
				switch {
				case createsFunction(toks, name) && argumentCount(toks) == arity:
					text, a := createOrReplace(body, toks), argumentList(toks)
					if stmt != "" && text != stmt && (!replaces(toks) || a != args) {
						return nil, false
					}
					stmt, args, altered, settings = text, a, false, nil
				case altersFunction(toks, name, arity) && stmt != "" && configures(toks):
					settings = append(settings, body[toks[0].Start:toks[len(toks)-1].End])
				case altersFunction(toks, name, arity):
					altered = true
				}
			}
		}
	}
	if altered || stmt == "" {
		return nil, false
	}
	return append([]string{stmt}, settings...), true
}

// configures says whether toks, an ALTER FUNCTION statement that altersFunction matched, name the
// function's argument list and then only set or reset its settings (ALTER FUNCTION f(…) SET a = b
// SET c = d, or RESET …): what running it again after the CREATE OR REPLACE gives back.
func configures(toks []sqlfile.Token) bool {
	rest, ok := leading(toks, "alter", "function")
	if !ok {
		return false
	}
	if len(rest) < 4 || rest[3].Text != "(" {
		return false
	}
	depth, i := 0, 3
	for ; i < len(rest); i++ {
		if rest[i].Kind != sqlfile.Punct {
			continue
		}
		if rest[i].Text == "(" {
			depth++
		} else if rest[i].Text == ")" {
			if depth--; depth == 0 {
				break
			}
		}
	}
	if i >= len(rest) {
		return false // no end to the argument list
	}
	actions := rest[i+1:]
	if len(actions) > 0 && actions[len(actions)-1].Text == ";" {
		actions = actions[:len(actions)-1]
	}
	if len(actions) == 0 {
		return false
	}
	// each action: SET name { = | TO } value, or RESET name | RESET ALL; nothing else (SET SCHEMA,
	// OWNER TO, RENAME TO, SECURITY DEFINER, … change what the CREATE statement gives)
	for len(actions) > 0 {
		switch {
		case isWord(actions[0], "set"):
			if len(actions) < 4 || isWord(actions[1], "schema") || actions[1].Kind != sqlfile.Ident ||
				!(actions[2].Text == "=" || isWord(actions[2], "to")) || isWord(actions[3], "set") || isWord(actions[3], "reset") {
				return false
			}
			actions = actions[4:]
			// a list value (SET search_path = a, b)
			for len(actions) >= 2 && actions[0].Text == "," {
				actions = actions[2:]
			}
		case isWord(actions[0], "reset"):
			if len(actions) < 2 || actions[1].Kind != sqlfile.Ident {
				return false
			}
			actions = actions[2:]
		default:
			return false
		}
	}
	return true
}

// isWord says whether t is the unquoted word w, case-insensitively.
func isWord(t sqlfile.Token, w string) bool {
	return t.Kind == sqlfile.Ident && strings.EqualFold(t.Text, w)
}

// functionName reads the unquoted name out of a function object of schema control_core.
func functionName(object string) (string, bool) {
	rest, ok := strings.CutPrefix(object, "function control_core.")
	if !ok {
		return "", false
	}
	name, _, ok := strings.Cut(rest, "(")
	if !ok || name == "" {
		return "", false
	}
	toks, err := sqlfile.Lex(name, sqlfile.Options{})
	if err != nil || len(toks) != 1 {
		return "", false
	}
	return identText(toks[0])
}

// identText is the name an identifier token stands for: an unquoted one folded to lower case,
// a quoted one with its quotes removed.
func identText(t sqlfile.Token) (string, bool) {
	switch t.Kind {
	case sqlfile.Ident:
		return strings.ToLower(t.Text), true
	case sqlfile.QuotedIdent:
		if strings.HasPrefix(t.Text, `"`) && strings.HasSuffix(t.Text, `"`) && len(t.Text) >= 2 {
			return strings.ReplaceAll(t.Text[1:len(t.Text)-1], `""`, `"`), true
		}
	}
	return "", false
}

// statements cuts a statement goose sends as one (a StatementBegin block may hold several) into its
// statements: at each ";" outside parentheses, comments left out.
func statements(toks []sqlfile.Token) [][]sqlfile.Token {
	var (
		out   [][]sqlfile.Token
		cur   []sqlfile.Token
		depth int
	)
	for _, t := range toks {
		if t.Kind == sqlfile.LineComment || t.Kind == sqlfile.BlockComment {
			continue
		}
		cur = append(cur, t)
		if t.Kind != sqlfile.Punct {
			continue
		}
		switch t.Text {
		case "(":
			depth++
		case ")":
			depth--
		case ";":
			if depth == 0 {
				out = append(out, cur)
				cur = nil
			}
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// leading matches the leading tokens of toks against words, case-insensitively; it returns
// the rest.
func leading(toks []sqlfile.Token, words ...string) ([]sqlfile.Token, bool) {
	for _, w := range words {
		if len(toks) == 0 || toks[0].Kind != sqlfile.Ident || !strings.EqualFold(toks[0].Text, w) {
			return nil, false
		}
		toks = toks[1:]
	}
	return toks, true
}

// namesFunction says whether toks start with control_core.NAME (.
func namesFunction(toks []sqlfile.Token, name string) bool {
	if len(toks) < 4 {
		return false
	}
	schema, ok1 := identText(toks[0])
	fn, ok2 := identText(toks[2])
	return ok1 && ok2 && schema == "control_core" && toks[1].Text == "." && fn == name && toks[3].Text == "("
}

// createsFunction says whether toks are CREATE [OR REPLACE] FUNCTION control_core.NAME(….
func createsFunction(toks []sqlfile.Token, name string) bool {
	rest, ok := leading(toks, "create")
	if !ok {
		return false
	}
	if r, ok := leading(rest, "or", "replace"); ok {
		rest = r
	}
	rest, ok = leading(rest, "function")
	return ok && namesFunction(rest, name)
}

// replaces says whether toks, a CREATE FUNCTION statement, say OR REPLACE.
func replaces(toks []sqlfile.Token) bool {
	_, ok := leading(toks[1:], "or", "replace")
	return ok
}

// argumentList is the text of the tokens of a CREATE FUNCTION statement's argument list, one
// space between tokens: two statements with the same one define the same function, not overloads.
func argumentList(toks []sqlfile.Token) string {
	var (
		b     strings.Builder
		depth int
	)
	for _, t := range toks {
		if t.Kind == sqlfile.Punct && t.Text == "(" {
			depth++
		}
		if depth > 0 {
			b.WriteString(strings.ToLower(t.Text))
			b.WriteByte(' ')
		}
		if t.Kind == sqlfile.Punct && t.Text == ")" {
			if depth--; depth == 0 {
				break
			}
		}
	}
	return b.String()
}

// objectArity is the number of arguments of a function object ("function control_core.f(text,
// bigint)": 2), as the catalog lists its identity arguments.
func objectArity(object string) int {
	_, rest, _ := strings.Cut(object, "(")
	rest = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), ")"))
	if rest == "" {
		return 0
	}
	n, depth := 1, 0
	for _, r := range rest {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				n++
			}
		}
	}
	return n
}

// argumentCount is the number of identity arguments a CREATE FUNCTION statement declares: its
// argument list's items but those declared OUT (which are part of the result, not the identity).
func argumentCount(toks []sqlfile.Token) int {
	var (
		n, depth int
		item     []sqlfile.Token
	)
	flush := func() {
		if len(item) > 0 && !(item[0].Kind == sqlfile.Ident && strings.EqualFold(item[0].Text, "out")) {
			n++
		}
		item = nil
	}
	for _, t := range toks {
		if t.Kind == sqlfile.Punct && t.Text == ")" {
			if depth--; depth == 0 {
				flush()
				break
			}
		}
		if depth == 1 && t.Kind == sqlfile.Punct && t.Text == "," {
			flush()
			continue
		}
		if depth > 0 {
			item = append(item, t)
		}
		if t.Kind == sqlfile.Punct && t.Text == "(" {
			depth++
		}
	}
	return n
}

// altersFunction says whether toks are ALTER or DROP FUNCTION/ROUTINE of control_core.NAME (of
// arity arguments, where the statement names its argument list), or
// a CREATE OR REPLACE PROCEDURE of it (which would fail, but say so rather than guess).
func altersFunction(toks []sqlfile.Token, name string, arity int) bool {
	for _, verb := range [][]string{{"alter", "function"}, {"alter", "routine"}, {"drop", "function"}, {"drop", "routine"}} {
		rest, ok := leading(toks, verb...)
		if !ok {
			continue
		}
		if r, ok := leading(rest, "if", "exists"); ok {
			rest = r
		}
		if len(rest) >= 3 {
			schema, ok1 := identText(rest[0])
			fn, ok2 := identText(rest[2])
			if ok1 && ok2 && schema == "control_core" && rest[1].Text == "." && fn == name {
				// a statement naming its argument list touches only the overload of that arity
				// (pg-0028 drops the 5-argument retry_at_ms, not the 6-argument one)
				return len(rest) < 4 || rest[3].Text != "(" || argumentCount(rest[3:]) == arity
			}
		}
	}
	return false
}

// createOrReplace is the statement toks hold, as written in src, with OR REPLACE after its
// CREATE where it lacks one.
func createOrReplace(src string, toks []sqlfile.Token) string {
	create, last := toks[0], toks[len(toks)-1]
	text := src[create.Start:last.End]
	if _, ok := leading(toks[1:], "or", "replace"); ok {
		return text
	}
	return src[create.Start:create.End] + " OR REPLACE" + src[create.End:last.End]
}
