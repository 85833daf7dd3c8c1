package sqlfile

import (
	"fmt"
	"strings"
)

// Kind is a token's lexical class, as PostgreSQL's scanner (scan.l) tells them apart.
type Kind int

// Token kinds. Whitespace is not a token; comments are, so callers can see goose's annotations.
const (
	Ident        Kind = iota // keyword or unquoted identifier (a$b included)
	QuotedIdent              // "x", U&"x"
	String                   // 'x', E'x', B'x', X'x', N'x', U&'x'
	DollarString             // $$x$$, $tag$x$tag$
	Number                   // 42, 4.2e1, 0x2A, 1_000
	Param                    // $1
	Operator                 // + - * / < > = ~ ! @ # % ^ & | ` ? and runs of them, ::
	Punct                    // ( ) [ ] , ; : .
	LineComment              // -- to the end of the line
	BlockComment             // /* … */, nested
	// Other is a character that is whitespace to some supported PostgreSQL majors only: the
	// vertical tab (\v), whitespace from PostgreSQL 16, scan.l's "other" single-character
	// token before (a syntax error in PostgreSQL 15). A token of its own, never whitespace, so
	// an edit that adds or removes one is never cosmetic.
	Other
)

// Token is one lexeme of the source.
type Token struct {
	Kind       Kind
	Text       string // the exact source text
	Start, End int    // byte offsets into the source
	// NewlineBefore says whether the whitespace or comments between the previous token and this
	// one hold a newline: two string constants separated by one are one constant (SQL's string
	// continuation), separated by spaces only they are a syntax error.
	NewlineBefore bool
}

// LexError is a source PostgreSQL's scanner would reject: an unterminated quote or comment.
type LexError struct {
	Offset int
	What   string
}

func (e *LexError) Error() string { return fmt.Sprintf("byte %d: %s", e.Offset, e.What) }

// Options change how the scanner reads strings.
type Options struct {
	// NoStandardConformingStrings reads '…' as standard_conforming_strings = off does: a
	// backslash escapes the next character. The default (off: conforming) is the server's since
	// PostgreSQL 9.1. A "SET standard_conforming_strings" in the source switches it too.
	NoStandardConformingStrings bool
}

// Lex splits src into tokens by PostgreSQL's lexical rules: whitespace, -- and nested /* */
// comments, quoted identifiers, string constants (E” escapes, standard_conforming_strings),
// dollar quoting with tags, numbers, parameters, operators and punctuation.
func Lex(src string, opts Options) ([]Token, error) {
	l := &lexer{src: src, scs: !opts.NoStandardConformingStrings}
	return l.run()
}

type lexer struct {
	src  string
	pos  int
	scs  bool
	toks []Token
}

// isSpace is scan.l's {space} in every supported major (15 … 18): PostgreSQL 16 added \v, which
// is therefore not whitespace here (see Other). \f has been whitespace in every version.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'
}
func isIdentStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80
}
func isIdentCont(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' || c == '$' }
func isDigit(c byte) bool     { return c >= '0' && c <= '9' }

const opChars = "+-*/<>=~!@#%^&|`?"

func (l *lexer) run() ([]Token, error) {
	newline := false
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		if isSpace(c) {
			if c == '\n' || c == '\r' {
				newline = true
			}
			l.pos++
			continue
		}
		start := l.pos
		kind, err := l.next()
		if err != nil {
			return nil, err
		}
		tok := Token{Kind: kind, Text: l.src[start:l.pos], Start: start, End: l.pos, NewlineBefore: newline}
		newline = kind == LineComment // a -- comment ends at (and takes) its newline
		if kind == BlockComment && strings.ContainsAny(tok.Text, "\n\r") {
			newline = true
		}
		l.toks = append(l.toks, tok)
		l.trackSCS()
	}
	return l.toks, nil
}

// next scans one token starting at l.pos and returns its kind.
func (l *lexer) next() (Kind, error) {
	s, i := l.src, l.pos
	c := s[i]
	peek := func(k int) byte {
		if i+k < len(s) {
			return s[i+k]
		}
		return 0
	}
	switch {
	case c == '-' && peek(1) == '-':
		end := strings.IndexAny(s[i:], "\n\r")
		if end < 0 {
			l.pos = len(s)
		} else {
			l.pos = i + end + 1
		}
		return LineComment, nil
	case c == '/' && peek(1) == '*':
		return BlockComment, l.blockComment()
	case c == '\'':
		return String, l.quoted(i+1, !l.scs)
	case (c == 'e' || c == 'E') && peek(1) == '\'':
		return String, l.quoted(i+2, true)
	case (c == 'b' || c == 'B' || c == 'x' || c == 'X' || c == 'n' || c == 'N') && peek(1) == '\'':
		return String, l.quoted(i+2, !l.scs)
	case (c == 'u' || c == 'U') && peek(1) == '&' && peek(2) == '\'':
		return String, l.quoted(i+3, false)
	case (c == 'u' || c == 'U') && peek(1) == '&' && peek(2) == '"':
		return QuotedIdent, l.quotedIdent(i + 3)
	case c == '"':
		return QuotedIdent, l.quotedIdent(i + 1)
	case c == '$' && isDigit(peek(1)):
		l.pos = i + 1
		for l.pos < len(s) && isDigit(s[l.pos]) {
			l.pos++
		}
		return Param, nil
	case c == '$':
		return DollarString, l.dollar()
	case isIdentStart(c):
		l.pos = i + 1
		for l.pos < len(s) && isIdentCont(s[l.pos]) {
			l.pos++
		}
		return Ident, nil
	case isDigit(c) || c == '.' && isDigit(peek(1)):
		l.number()
		return Number, nil
	case c == ':' && peek(1) == ':':
		l.pos = i + 2
		return Operator, nil
	case strings.IndexByte("()[],;:.", c) >= 0:
		l.pos = i + 1
		return Punct, nil
	case strings.IndexByte(opChars, c) >= 0:
		l.operator()
		return Operator, nil
	case c == '\v':
		l.pos = i + 1
		return Other, nil
	}
	return 0, &LexError{Offset: i, What: fmt.Sprintf("unexpected character %q", c)}
}

func (l *lexer) blockComment() error {
	depth, i := 0, l.pos
	for i < len(l.src) {
		switch {
		case strings.HasPrefix(l.src[i:], "/*"):
			depth++
			i += 2
		case strings.HasPrefix(l.src[i:], "*/"):
			depth--
			i += 2
			if depth == 0 {
				l.pos = i
				return nil
			}
		default:
			i++
		}
	}
	return &LexError{Offset: l.pos, What: "unterminated /* comment"}
}

// quoted scans a '…' constant whose body starts at i; ” is a quote, and with backslashes a \
// escapes the next character.
func (l *lexer) quoted(i int, backslashes bool) error {
	for i < len(l.src) {
		switch c := l.src[i]; {
		case backslashes && c == '\\':
			i += 2
		case c == '\'' && i+1 < len(l.src) && l.src[i+1] == '\'':
			i += 2
		case c == '\'':
			l.pos = i + 1
			return nil
		default:
			i++
		}
	}
	return &LexError{Offset: l.pos, What: "unterminated quoted string"}
}

func (l *lexer) quotedIdent(i int) error {
	for i < len(l.src) {
		if l.src[i] == '"' {
			if i+1 < len(l.src) && l.src[i+1] == '"' {
				i += 2
				continue
			}
			l.pos = i + 1
			return nil
		}
		i++
	}
	return &LexError{Offset: l.pos, What: "unterminated quoted identifier"}
}

// dollar scans $tag$…$tag$ (the tag may be empty). A '$' that starts no valid tag is an error,
// as in PostgreSQL.
func (l *lexer) dollar() error {
	s, i := l.src, l.pos+1
	if i < len(s) && isIdentStart(s[i]) {
		for i < len(s) && isIdentCont(s[i]) && s[i] != '$' {
			i++
		}
	}
	if i >= len(s) || s[i] != '$' {
		return &LexError{Offset: l.pos, What: "'$' starts neither a parameter nor a dollar quote"}
	}
	tag := s[l.pos : i+1]
	end := strings.Index(s[i+1:], tag)
	if end < 0 {
		return &LexError{Offset: l.pos, What: "unterminated dollar-quoted string " + tag}
	}
	l.pos = i + 1 + end + len(tag)
	return nil
}

func (l *lexer) number() {
	s, i := l.src, l.pos
	if s[i] == '0' && i+1 < len(s) && strings.IndexByte("xXoObB", s[i+1]) >= 0 {
		i += 2
		for i < len(s) && (isIdentCont(s[i])) {
			i++
		}
		l.pos = i
		return
	}
	digits := func() {
		for i < len(s) && (isDigit(s[i]) || s[i] == '_') {
			i++
		}
	}
	digits()
	// "1..2" is 1 followed by ".." in PostgreSQL; only one '.' that is not the start of ".."
	if i < len(s) && s[i] == '.' && !(i+1 < len(s) && s[i+1] == '.') {
		i++
		digits()
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		j := i + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		if j < len(s) && isDigit(s[j]) {
			i = j
			digits()
		}
	}
	l.pos = i
}

// operator scans a run of operator characters the way scan.l does: it stops before a comment
// start, and a multi-character operator ending in + or - keeps that only if it also holds one
// of ~ ! @ # % ^ & | ` ? (so "=-1" is "=" then "-").
func (l *lexer) operator() {
	s, i := l.src, l.pos
	for i < len(s) && strings.IndexByte(opChars, s[i]) >= 0 {
		if i > l.pos && (strings.HasPrefix(s[i:], "--") || strings.HasPrefix(s[i:], "/*")) {
			break
		}
		i++
	}
	op := s[l.pos:i]
	if len(op) > 1 && !strings.ContainsAny(op, "~!@#%^&|`?") {
		for len(op) > 1 && (op[len(op)-1] == '+' || op[len(op)-1] == '-') {
			op = op[:len(op)-1]
		}
	}
	l.pos += len(op)
}

// trackSCS follows "SET [SESSION|LOCAL] standard_conforming_strings {TO|=} value" so the
// strings after it are read the way the server will read them.
func (l *lexer) trackSCS() {
	var code []Token
	for i := len(l.toks) - 1; i >= 0 && len(code) < 5; i-- {
		if k := l.toks[i].Kind; k != LineComment && k != BlockComment {
			code = append([]Token{l.toks[i]}, code...)
		}
	}
	n := len(code)
	if n < 4 {
		return
	}
	val, eq, name := code[n-1], code[n-2], code[n-3]
	set := code[n-4]
	if (strings.EqualFold(set.Text, "session") || strings.EqualFold(set.Text, "local")) && n == 5 {
		set = code[n-5]
	}
	if !strings.EqualFold(set.Text, "set") || !strings.EqualFold(name.Text, "standard_conforming_strings") ||
		!(eq.Text == "=" || strings.EqualFold(eq.Text, "to")) {
		return
	}
	switch strings.ToLower(strings.Trim(val.Text, "'")) {
	case "on", "true", "yes", "1":
		l.scs = true
	case "off", "false", "no", "0":
		l.scs = false
	}
}
