// Package sqlfile reads a goose SQL migration the way qlmigrate runs it: a scanner of
// PostgreSQL's lexical rules (comments, quoted identifiers, string constants with E” escapes
// and standard_conforming_strings, dollar quoting, numbers, operators), the statements of its Up
// and Down sections as goose's annotations group them, and its normal form: the statements
// with every run of whitespace and comments reduced to one separator (touching tokens stay
// touching), whose hash tells a cosmetic edit of an applied
// migration (comments, whitespace) from one that changes what runs.
//
// goose's annotations are kept in the normal form by their effect (which section, which
// statements are grouped, whether a transaction wraps the file), since they change what runs;
// the comment text around them is not.
package sqlfile
