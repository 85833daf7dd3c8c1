package sqlfile

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Statement is one statement qlmigrate sends to the server.
type Statement struct {
	SQL    string  // the source text, leading comments included, ending in ";"
	Tokens []Token // its tokens, comments included
}

// File is a goose SQL migration as qlmigrate runs it.
type File struct {
	NoTransaction bool // "-- +goose NO TRANSACTION": statements run outside a transaction
	Up, Down      []Statement
}

// Annotations goose reads from "-- +goose …" lines (case-insensitive).
const (
	annUp             = "up"
	annDown           = "down"
	annStatementBegin = "statementbegin"
	annStatementEnd   = "statementend"
	annNoTransaction  = "no transaction"
)

// Parse reads a goose SQL migration: "-- +goose Up" and "-- +goose Down" sections,
// "-- +goose StatementBegin/End" blocks sent as one statement, "-- +goose NO TRANSACTION".
// Outside a block a statement ends at a ";" outside parentheses, as the lexer sees it (so a ";"
// inside a string, a comment or a dollar quote never ends one). An annotation must start its line,
// as goose requires. ENVSUB (substituting environment variables) is refused: what runs would
// depend on the environment of the machine, and no checksum could vouch for it.
func Parse(src string) (*File, error) {
	toks, err := Lex(src, Options{})
	if err != nil {
		return nil, err
	}
	f := &File{}
	var (
		section   *[]Statement
		block     = -1 // offset where a StatementBegin block's text starts, -1 outside one
		stmtStart = -1 // index of the first token of the statement being collected
		depth     int
	)
	flush := func(end int, upTo int) {
		text := strings.TrimSpace(src[toks[stmtStart].Start:end])
		*section = append(*section, Statement{SQL: text, Tokens: toks[stmtStart:upTo]})
		stmtStart = -1
	}
	pendingCode := func(upTo int) bool {
		if stmtStart < 0 {
			return false
		}
		for _, t := range toks[stmtStart:upTo] {
			if t.Kind != LineComment && t.Kind != BlockComment {
				return true
			}
		}
		return false
	}
	for i, t := range toks {
		if ann, ok := annotation(t); ok {
			if lineStart := strings.LastIndexAny(src[:t.Start], "\n\r") + 1; lineStart != t.Start {
				return nil, fmt.Errorf("line %d: %q: a goose annotation must start its line", lineOf(src, t.Start), strings.TrimSpace(t.Text))
			}
			if block < 0 && pendingCode(i) {
				return nil, fmt.Errorf("line %d: the statement before %q does not end in ';'", lineOf(src, t.Start), strings.TrimSpace(t.Text))
			}
			if block < 0 {
				stmtStart = -1 // comments only: dropped
			}
			switch ann {
			case annUp, annDown:
				if block >= 0 {
					return nil, fmt.Errorf("line %d: %q inside a StatementBegin block", lineOf(src, t.Start), strings.TrimSpace(t.Text))
				}
				switch {
				case ann == annUp && section == nil && f.Up == nil:
					section = &f.Up
				case ann == annDown && section == &f.Up:
					section = &f.Down
				default:
					return nil, fmt.Errorf("line %d: %q out of order (want one Up, then at most one Down)", lineOf(src, t.Start), strings.TrimSpace(t.Text))
				}
			case annStatementBegin:
				if section == nil || block >= 0 {
					return nil, fmt.Errorf("line %d: StatementBegin outside a section or inside a block", lineOf(src, t.Start))
				}
				block, stmtStart = t.End, i+1
			case annStatementEnd:
				if block < 0 {
					return nil, fmt.Errorf("line %d: StatementEnd without StatementBegin", lineOf(src, t.Start))
				}
				if stmtStart == i || !pendingCode(i) {
					return nil, fmt.Errorf("line %d: an empty StatementBegin block", lineOf(src, t.Start))
				}
				flush(t.Start, i)
				block = -1
			case annNoTransaction:
				f.NoTransaction = true
			default:
				return nil, fmt.Errorf("line %d: %q: unsupported goose annotation (ENVSUB is refused: what runs would depend on the environment)", lineOf(src, t.Start), strings.TrimSpace(t.Text))
			}
			continue
		}
		if stmtStart < 0 {
			stmtStart = i
		}
		if t.Kind == LineComment || t.Kind == BlockComment || block >= 0 {
			continue
		}
		if section == nil {
			return nil, fmt.Errorf("line %d: SQL before \"-- +goose Up\"", lineOf(src, t.Start))
		}
		switch t.Text {
		case "(":
			depth++
		case ")":
			depth--
		case ";":
			if depth == 0 {
				flush(t.End, i+1)
			}
		}
	}
	switch {
	case block >= 0:
		return nil, fmt.Errorf("a StatementBegin block is not closed by StatementEnd")
	case pendingCode(len(toks)):
		return nil, fmt.Errorf("the last statement does not end in ';'")
	case section == nil:
		return nil, fmt.Errorf("no \"-- +goose Up\" annotation")
	}
	return f, nil
}

// annotation recognises a goose annotation comment as goose does: "--", then "+goose", then
// the command in any case.
func annotation(t Token) (string, bool) {
	if t.Kind != LineComment {
		return "", false
	}
	rest := strings.TrimSpace(strings.TrimLeft(t.Text, "-"))
	cmd, ok := strings.CutPrefix(rest, "+goose")
	if !ok {
		return "", false
	}
	return strings.ToLower(strings.Join(strings.Fields(cmd), " ")), true
}

func lineOf(src string, off int) int { return strings.Count(src[:off], "\n") + 1 }

// NormalFormVersion names the normal form; it is part of what is hashed, so a change to the
// rules cannot be mistaken for a cosmetic edit.
const NormalFormVersion = "qlmigrate-normal/2"

// Normal is the file without its comments and with its whitespace reduced to what PostgreSQL and
// goose can tell apart: every token of every statement as written (case kept, literals byte for
// byte), one line per statement, and what the annotations decide: whether it runs in a
// transaction, where Up and Down start and where statements end (StatementBegin/End grouping
// included). Two files with the same normal form send the same statements, in the same
// transactions, to the server.
//
// Between two tokens of a statement the normal form writes nothing where the source has nothing
// (they touch) and one separator where the source has any run of whitespace and comments, so the
// normal form read by PostgreSQL 15 … 18 yields the same tokens as the source: "1 AND" and
// "1AND" (an error from PostgreSQL 15), ": =" and ":=" differ. Adding or removing the only
// whitespace between two tokens is thus a statement edit even where the server would read the
// same tokens ("x::int", "x :: int"); changing how much whitespace there is, or which comments,
// is cosmetic. The separator is " ", except where PostgreSQL reads the whitespace: two string
// constants separated by a newline (and only spaces or -- comments) are one constant, so there
// it is "\n".
func (f *File) Normal() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\nno_transaction %t\n", NormalFormVersion, f.NoTransaction)
	for _, sec := range []struct {
		name  string
		stmts []Statement
	}{{"up", f.Up}, {"down", f.Down}} {
		fmt.Fprintf(&b, "-- %s %d\n", sec.name, len(sec.stmts))
		for _, s := range sec.stmts {
			b.WriteString(normalStatement(s.Tokens))
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func normalStatement(toks []Token) string {
	var b strings.Builder
	var prev *Token
	onlyLineComments := true
	for i := range toks {
		t := &toks[i]
		switch t.Kind {
		case LineComment:
			continue
		case BlockComment:
			onlyLineComments = false
			continue
		}
		if prev != nil && t.Start > prev.End { // touching tokens stay touching
			sep := " "
			if prev.Kind == String && t.Kind == String && t.NewlineBefore && onlyLineComments {
				sep = "\n"
			}
			b.WriteString(sep)
		}
		b.WriteString(t.Text)
		prev, onlyLineComments = t, true
	}
	return b.String()
}

// NormalSHA256 is the hex sha256 of src's normal form.
func NormalSHA256(src string) (string, error) {
	f, err := Parse(src)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(f.Normal()))
	return hex.EncodeToString(sum[:]), nil
}
