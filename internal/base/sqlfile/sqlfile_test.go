package sqlfile

import (
	"strings"
	"testing"
)

func texts(t *testing.T, src string, opts Options) []string {
	t.Helper()
	toks, err := Lex(src, opts)
	if err != nil {
		t.Fatalf("Lex(%q): %v", src, err)
	}
	var out []string
	for _, tok := range toks {
		out = append(out, tok.Text)
	}
	return out
}

func TestLexTrickyInputs(t *testing.T) {
	cases := []struct {
		name string
		src  string
		opts Options
		want []string
	}{
		{"nested block comment", "a /* x /* y */ ; */ b", Options{}, []string{"a", "/* x /* y */ ; */", "b"}},
		{"line comment with quote", "a -- it's; here\nb", Options{}, []string{"a", "-- it's; here\n", "b"}},
		{"doubled quote", "'it''s;'", Options{}, []string{"'it''s;'"}},
		{"conforming backslash ends nothing", `'a\' ; 'b'`, Options{}, []string{`'a\'`, ";", "'b'"}},
		{"non-conforming backslash escapes", `'a\' ; ' b`, Options{NoStandardConformingStrings: true}, []string{`'a\' ; '`, "b"}},
		{"SET switches conformity", `SET standard_conforming_strings = off; 'a\'x'`, Options{}, []string{"SET", "standard_conforming_strings", "=", "off", ";", `'a\'x'`}},
		{"escape string", `E'\'; -- '`, Options{}, []string{`E'\'; -- '`}},
		{"E then space is an identifier", `E '\'`, Options{}, []string{"E", `'\'`}},
		{"quoted identifier", `"a "" ; b"."c"`, Options{}, []string{`"a "" ; b"`, ".", `"c"`}},
		{"unicode escapes", `U&"d\0061t" U&'x'`, Options{}, []string{`U&"d\0061t"`, `U&'x'`}},
		{"dollar quote", "$$ ; ' $$", Options{}, []string{"$$ ; ' $$"}},
		{"tagged dollar quote holds $$", "$fn$ a $$ b $fn$ c", Options{}, []string{"$fn$ a $$ b $fn$", "c"}},
		{"parameter and identifier with $", "a$b $1", Options{}, []string{"a$b", "$1"}},
		{"operators and comment start", "a*/* c */b =-1 x::int", Options{}, []string{"a", "*", "/* c */", "b", "=", "-", "1", "x", "::", "int"}},
		{"numbers", "1.5e-3 .5 0x1F 1_000 1..2", Options{}, []string{"1.5e-3", ".5", "0x1F", "1_000", "1", ".", ".2"}},
		{"bit and hex strings", "B'01' X'ff' N'n'", Options{}, []string{"B'01'", "X'ff'", "N'n'"}},
		{"vertical tab is a token, form feed whitespace", "a\vb\fc", Options{}, []string{"a", "\v", "b", "c"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := texts(t, c.src, c.opts)
			if strings.Join(got, "|") != strings.Join(c.want, "|") {
				t.Errorf("Lex(%q) = %q, want %q", c.src, got, c.want)
			}
		})
	}
	for _, bad := range []string{"'open", "/* /* */", `"open`, "$a$ never closed", "E'\\'"} {
		if _, err := Lex(bad, Options{}); err == nil {
			t.Errorf("Lex(%q): no error, want an unterminated-token error", bad)
		}
	}
}

const base = `-- +goose Up
-- create a table
CREATE TABLE t (a text DEFAULT 'x  y');
-- +goose StatementBegin
CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; $$;
-- +goose StatementEnd
INSERT INTO t VALUES ('a'
'b');
`

func TestNormalFormTellsCosmeticFromStatementEdits(t *testing.T) {
	norm := func(src string) string {
		t.Helper()
		sum, err := NormalSHA256(src)
		if err != nil {
			t.Fatalf("NormalSHA256(%q): %v", src, err)
		}
		return sum
	}
	want := norm(base)
	cosmetic := map[string]string{
		"comments and blank lines":    strings.Replace(base, "-- create a table\n", "-- create the table\n\n/* why: see ADR */\n", 1),
		"reindented statement":        strings.Replace(base, "CREATE TABLE t (a text", "CREATE   TABLE\n    t\t(a text", 1),
		"trailing comment":            base + "-- the end\n",
		"comment in a block":          strings.Replace(base, "SELECT 1; $$;", "SELECT 1; $$; -- one", 1),
		"same split without a block":  strings.Replace(strings.Replace(base, "-- +goose StatementBegin\n", "", 1), "-- +goose StatementEnd\n", "", 1),
		"continuation with a comment": strings.Replace(base, "('a'\n'b')", "('a' -- first\n'b')", 1),
		"form feed for a space":       strings.Replace(base, "CREATE TABLE t", "CREATE\fTABLE t", 1),
		"comment for a space":         strings.Replace(base, "CREATE TABLE t", "CREATE/* c */TABLE t", 1),
		"tab and newline for a space": strings.Replace(base, "VALUES ('a'", "VALUES\t\n\t('a'", 1),
	}
	for name, src := range cosmetic {
		if got := norm(src); got != want {
			t.Errorf("%s: normal hash changed; a comment/whitespace edit must keep it\n%s", name, src)
		}
	}
	statements := map[string]string{
		"whitespace in a literal":     strings.Replace(base, "'x  y'", "'x y'", 1),
		"whitespace in a dollar body": strings.Replace(base, "SELECT 1; $$", "SELECT 1;  $$", 1),
		"identifier case":             strings.Replace(base, "CREATE TABLE t", "CREATE TABLE T", 1),
		"continuation broken":         strings.Replace(base, "('a'\n'b')", "('a' 'b')", 1),
		"block regrouped":             strings.Replace(strings.Replace(base, "-- +goose StatementEnd\n", "", 1), "'b');\n", "'b');\n-- +goose StatementEnd\n", 1),
		"no transaction":              "-- +goose NO TRANSACTION\n" + base,
		"down section":                base + "-- +goose Down\nDROP TABLE t;\n",
		"comment becomes code":        strings.Replace(base, "-- create a table", "SELECT 1; -- create a table", 1),
	}
	for name, src := range statements {
		if got := norm(src); got == want {
			t.Errorf("%s: normal hash unchanged; a statement edit must change it\n%s", name, src)
		}
	}
}

func TestParseSplitsAsTheServerReads(t *testing.T) {
	f, err := Parse(base + "-- +goose Down\nDROP TABLE t; -- ; not a statement\nSELECT ';' ;\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Up) != 3 || len(f.Down) != 2 || f.NoTransaction {
		t.Fatalf("up %d, down %d, no tx %v; want 3, 2, false", len(f.Up), len(f.Down), f.NoTransaction)
	}
	if got := f.Up[1].SQL; got != "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; $$;" {
		t.Errorf("block statement = %q", got)
	}
	if got := f.Up[0].SQL; !strings.HasPrefix(got, "-- create a table\nCREATE TABLE") {
		t.Errorf("first statement keeps its leading comment: %q", got)
	}
	for _, bad := range []string{
		"SELECT 1;\n-- +goose Up\n",
		"-- +goose Up\nSELECT 1\n",
		"-- +goose Up\n-- +goose StatementBegin\nSELECT 1;\n",
		"-- +goose Up\n  -- +goose StatementBegin\nSELECT 1;\n-- +goose StatementEnd\n",
		"-- +goose ENVSUB ON\n-- +goose Up\nSELECT '${X}';\n",
		"-- +goose Down\nSELECT 1;\n",
		"no annotation;\n",
	} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		}
	}
}

// TestNormalFormKeepsWhatTheScannerReads: each edit changes how PostgreSQL 15 … 18 tokenises the
// statement, or whether it accepts it, so none is cosmetic.
func TestNormalFormKeepsWhatTheScannerReads(t *testing.T) {
	const src = "-- +goose Up\n" +
		"SELECT 1 AND true, x::int, f(a := 1);\n" +
		"-- +goose StatementBegin\n" +
		"DO $$ DECLARE v int; BEGIN v := 1; END $$;\n" +
		"-- +goose StatementEnd\n" +
		"SELECT a FROM t WHERE a >= 1 OR b = - 1;\n"
	want, err := NormalSHA256(src)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, old, new string }{
		// PostgreSQL 15+ rejects a number followed by an identifier (trailing junk); 14 read 1 AND.
		{"space removed after a number", "1 AND", "1AND"},
		// ":=" is one token (COLON_EQUALS, a named argument), ": =" two (a syntax error)
		{"named-argument arrow split", "a := 1", "a : = 1"},
		// the same tokens to the server, but whether whitespace separates two tokens is kept
		{"space added between touching tokens", "x::int", "x :: int"},
		{"operator split", "a >= 1", "a > = 1"},
		{"operator joined", "= - 1", "= -1"},
		// \v is whitespace from PostgreSQL 16 only: in 15 a syntax error.
		{"vertical tab for a space", "SELECT a FROM", "SELECT\va FROM"},
		{"vertical tab added", "SELECT 1 AND", "SELECT 1 \vAND"},
		{"inside a dollar-quoted body", "v := 1", "v  := 1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			edited := strings.Replace(src, c.old, c.new, 1)
			if edited == src {
				t.Fatalf("%q not in the source", c.old)
			}
			got, err := NormalSHA256(edited)
			if err != nil {
				t.Fatalf("NormalSHA256: %v", err)
			}
			if got == want {
				t.Errorf("%q -> %q: normal hash unchanged, want statements changed", c.old, c.new)
			}
		})
	}
}
