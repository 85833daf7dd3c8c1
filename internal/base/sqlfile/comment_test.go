package sqlfile

import "testing"

func TestCommentTextKeepsNamesOnOneLineInTheirOrder(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain_name", "plain_name"},
		{"a\nb\rc\td", "a b c d"},
		{"é ü 名前", "é ü 名前"},
		{"x\u202Eevil", "x evil"},    // right-to-left override
		{"x\u0085y\u009bz", "x y z"}, // C1 controls: next line, CSI
		{"x\u2028y\u2029z\u200bw", "x y z w"},
		{"\x1b[31mred", " [31mred"},
	} {
		if got := CommentText(c.in); got != c.want {
			t.Errorf("CommentText(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
