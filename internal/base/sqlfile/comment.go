package sqlfile

import (
	"strings"
	"unicode"
)

// CommentText makes s safe inside a one-line "--" SQL comment of a script a person reads and
// psql runs: every C0 and C1 control (a newline would end the comment and turn the rest into a
// statement or a psql meta-command such as \! or \echo), line and paragraph separator and
// format character (bidi overrides such as U+202E make a terminal show text in another order
// than it is) becomes a space. Names from the catalogs and connection targets may hold any of
// them.
func CommentText(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, s)
}
