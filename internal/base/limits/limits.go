// Package limits holds the bounds the database enforces on admin and replica input, so that every
// command checks them before it connects (exit 2) instead of learning them from a refused
// statement (exit 3). Each constant mirrors a CHECK constraint or a type of sql/migrations;
// TestBoundsAgreeWithTheDatabase probes a migrated database on both sides of every boundary.
//
// Error messages built here describe input by rule and position only: an executor spec may hold
// secrets, so no part of it is ever quoted.
package limits

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"unicode/utf8"
)

// Identifiers of projects, tasks and triggers: the CHECK of projects.project_id, tasks.task_id and
// triggers.trigger_id (0002, 0004, 0005).
const (
	IDPattern = `^[a-z0-9][a-z0-9_-]{0,62}$`
	MaxID     = 63
	IDRule    = "1-63 characters of [a-z0-9_-], starting with [a-z0-9]"
)

// Cron specs and time zones: the CHECKs of trigger_revisions.cron_spec and .timezone (0005),
// which count characters. Go is stricter than the column on purpose: a spec is printable ASCII
// without leading or trailing spaces, so what is stored is exactly what was parsed.
const (
	MaxCronSpec  = 200
	CronRule     = "at most 200 characters of printable ASCII, without leading or trailing spaces"
	MaxTimeZone  = 64
	TimeZoneRule = "an IANA name of at most 64 characters of [A-Za-z0-9/_+-]"
)

// MaxOwner is the longest claim owner: the CHECK of trigger_schedules.claim_owner (0014).
const MaxOwner = 128

// Executor specs: a JSON object stored as jsonb (execution_revisions.spec, 0003).
const (
	// MaxExecutorSpec bounds the spec as given, in bytes (a product bound: the column has none).
	MaxExecutorSpec = 64 << 10
	// MaxSpecDepth bounds nesting. jsonb parses recursively and refuses, with "stack depth limit
	// exceeded", a depth that depends on the server's max_stack_depth (a few thousand levels at
	// the default); 1000 is far below that and far above any real spec.
	MaxSpecDepth = 1000
	// MaxNumericIntegerDigits and MaxNumericScale are numeric's range, which jsonb numbers have:
	// at most 131072 digits before the decimal point and 16383 after it (a number such as 1e-20000
	// or 1e200000 is refused with "value overflows numeric format").
	MaxNumericIntegerDigits = 131072
	MaxNumericScale         = 16383
)

var idRE = regexp.MustCompile(IDPattern)

// CheckID checks a project, task or trigger identifier.
func CheckID(kind, id string) error {
	if !idRE.MatchString(id) {
		return fmt.Errorf("%s id %s: want %s", kind, quoteShort(id), IDRule)
	}
	return nil
}

// CheckCronSpec checks what the database and the stored form need; ParseSchedule checks the cron
// grammar after it.
func CheckCronSpec(spec string) error {
	if spec == "" {
		return errors.New("cron spec is empty")
	}
	if len(spec) > MaxCronSpec {
		return fmt.Errorf("cron spec of %d bytes: want %s", len(spec), CronRule)
	}
	for i := 0; i < len(spec); i++ {
		if c := spec[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("cron spec %s: byte %d is not printable ASCII: want %s", quoteShort(spec), i+1, CronRule)
		}
	}
	if spec[0] == ' ' || spec[len(spec)-1] == ' ' {
		return fmt.Errorf("cron spec %s: leading or trailing spaces: want %s", quoteShort(spec), CronRule)
	}
	return nil
}

var zoneRE = regexp.MustCompile(`^[A-Za-z0-9/_+-]+$`)

// CheckTimeZone checks the form of a time zone name; ParseSchedule resolves it after.
func CheckTimeZone(zone string) error {
	if len(zone) > MaxTimeZone || !zoneRE.MatchString(zone) {
		return fmt.Errorf("time zone %s: want %s", quoteShort(zone), TimeZoneRule)
	}
	return nil
}

// SpecError says why an executor spec is refused, by rule and position only.
type SpecError struct {
	Offset int // 1-based byte position, 0 when the rule is about the whole spec
	Kind   string
}

func (e *SpecError) Error() string {
	if e.Offset > 0 {
		return fmt.Sprintf("invalid at byte %d: %s", e.Offset, e.Kind)
	}
	return e.Kind
}

// CheckExecutorSpec accepts exactly the JSON objects jsonb stores, up to MaxExecutorSpec bytes and
// MaxSpecDepth levels: valid UTF-8, no \u0000 and no unpaired surrogate escape (jsonb refuses
// both), every number within numeric's range, nothing after the object.
func CheckExecutorSpec(spec []byte) error {
	if len(spec) > MaxExecutorSpec {
		return &SpecError{Kind: fmt.Sprintf("%d bytes, at most %d", len(spec), MaxExecutorSpec)}
	}
	if !utf8.Valid(spec) {
		return &SpecError{Offset: firstInvalidUTF8(spec) + 1, Kind: "not valid UTF-8"}
	}
	if err := scanJSONB(spec); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(spec))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		// the decoder's message quotes the offending character: use only its position
		var syntax *json.SyntaxError
		switch {
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return &SpecError{Offset: len(spec), Kind: "unexpected end of input; want a JSON object"}
		case errors.As(err, &syntax):
			return &SpecError{Offset: int(syntax.Offset), Kind: "unexpected character"}
		}
		return &SpecError{Kind: "not valid JSON"}
	}
	if rest := bytes.TrimLeft(spec[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return &SpecError{Offset: len(spec) - len(rest) + 1, Kind: "unexpected data after the JSON value"}
	}
	if _, ok := v.(map[string]any); !ok {
		return &SpecError{Kind: "not a JSON object; want {…}"}
	}
	return duplicateKey(spec)
}

// duplicateKey refuses an object that names a key twice, as apply's YAML reader does: jsonb keeps
// the last value silently, so the other one would be lost unseen. spec is valid JSON here.
func duplicateKey(spec []byte) error {
	dec := json.NewDecoder(bytes.NewReader(spec))
	dec.UseNumber()
	// one entry per open container: the keys seen so far (nil for an array), and whether the
	// next token of an object is a key
	type frame struct {
		keys  map[string]bool
		atKey bool
	}
	var stack []frame
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return &SpecError{Kind: "not valid JSON"}
		}
		top := len(stack) - 1
		if top >= 0 && stack[top].keys != nil && stack[top].atKey {
			if key, ok := tok.(string); ok {
				if stack[top].keys[key] {
					// the key's opening quote: skip the separator the offset may still point at
					at := int(start) + bytes.IndexByte(spec[start:], '"') + 1
					return &SpecError{Offset: at, Kind: "a duplicate key in an object (jsonb would keep only the last)"}
				}
				stack[top].keys[key] = true
				stack[top].atKey = false
				continue
			}
		}
		if top >= 0 && stack[top].keys != nil {
			stack[top].atKey = true // a value ends here unless it opens a container (then its end does)
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{keys: map[string]bool{}, atKey: true})
		case json.Delim('['):
			stack = append(stack, frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if top := len(stack) - 1; top >= 0 && stack[top].keys != nil {
				stack[top].atKey = true
			}
		}
	}
}

// scanJSONB walks the spec's tokens for what encoding/json accepts but jsonb refuses, and for
// nesting deeper than MaxSpecDepth. Grammar errors are left to the decoder.
func scanJSONB(s []byte) error {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '{' || c == '[':
			if depth++; depth > MaxSpecDepth {
				return &SpecError{Offset: i + 1, Kind: fmt.Sprintf("nested deeper than %d levels", MaxSpecDepth)}
			}
		case c == '}' || c == ']':
			depth--
		case c == '"':
			end, err := scanString(s, i)
			if err != nil {
				return err
			}
			i = end
		case c == '-' || c >= '0' && c <= '9':
			end := i
			for end < len(s) && bytes.IndexByte([]byte("+-.0123456789eE"), s[end]) >= 0 {
				end++
			}
			if !numericFits(s[i:end]) {
				return &SpecError{Offset: i + 1, Kind: fmt.Sprintf("a number outside PostgreSQL numeric's range (at most %d digits before the decimal point and %d after it)", MaxNumericIntegerDigits, MaxNumericScale)}
			}
			i = end - 1
		}
	}
	return nil
}

// scanString checks the escapes of the string starting at s[start] (a quote) and returns the
// index of its closing quote (or len(s)-1 when it is unterminated: the decoder reports that).
func scanString(s []byte, start int) (int, error) {
	pendingHigh := -1 // offset of a high surrogate escape waiting for its low half
	for i := start + 1; i < len(s); i++ {
		switch s[i] {
		case '"':
			if pendingHigh >= 0 {
				return 0, loneSurrogate(pendingHigh)
			}
			return i, nil
		case '\\':
			if i+1 >= len(s) {
				return len(s) - 1, nil
			}
			if s[i+1] != 'u' {
				if pendingHigh >= 0 {
					return 0, loneSurrogate(pendingHigh)
				}
				i++
				continue
			}
			if i+6 > len(s) {
				return len(s) - 1, nil
			}
			r, err := strconv.ParseUint(string(s[i+2:i+6]), 16, 32)
			if err != nil {
				return len(s) - 1, nil // the decoder reports the bad escape
			}
			switch {
			case r == 0:
				return 0, &SpecError{Offset: i + 1, Kind: `\u0000 (jsonb cannot store NUL)`}
			case r >= 0xD800 && r <= 0xDBFF:
				if pendingHigh >= 0 {
					return 0, loneSurrogate(pendingHigh)
				}
				pendingHigh = i
			case r >= 0xDC00 && r <= 0xDFFF:
				if pendingHigh < 0 {
					return 0, loneSurrogate(i)
				}
				pendingHigh = -1
			default:
				if pendingHigh >= 0 {
					return 0, loneSurrogate(pendingHigh)
				}
			}
			i += 5
		default:
			if pendingHigh >= 0 {
				return 0, loneSurrogate(pendingHigh)
			}
		}
	}
	return len(s) - 1, nil
}

func loneSurrogate(at int) error {
	return &SpecError{Offset: at + 1, Kind: "a \\u escape of an unpaired UTF-16 surrogate (jsonb refuses it)"}
}

// numericFits reports whether a JSON number token is within numeric's range, computed as
// numeric_in does: the scale is the digits after the point minus the exponent, the integer
// digits are those of the value's leading digit's position. A malformed token reports true: the
// decoder refuses it.
func numericFits(tok []byte) bool {
	mant, exp := tok, int64(0)
	if i := bytes.IndexAny(tok, "eE"); i >= 0 {
		mant = tok[:i]
		e, err := strconv.ParseInt(string(tok[i+1:]), 10, 64)
		if err != nil {
			var numErr *strconv.NumError
			if errors.As(err, &numErr) && errors.Is(numErr.Err, strconv.ErrRange) {
				return false // beyond any bound
			}
			return true
		}
		exp = max(min(e, 1<<40), -1<<40) // far beyond both bounds, and no overflow below
	}
	mant = bytes.TrimPrefix(mant, []byte("-"))
	intPart, frac, _ := bytes.Cut(mant, []byte("."))
	if int64(len(frac))-exp > MaxNumericScale {
		return false
	}
	digits := append(append([]byte{}, intPart...), frac...)
	lead := bytes.IndexFunc(digits, func(r rune) bool { return r != '0' })
	if lead < 0 {
		return true // zero: only its scale matters
	}
	// the leading digit's place: 1 for units, 0 for tenths, -1 for hundredths …
	place := int64(len(intPart)-lead) + exp
	return place <= MaxNumericIntegerDigits
}

func firstInvalidUTF8(s []byte) int {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(s)
}

// quoteShort quotes an identifier-like value for a message, cut to a length that keeps the
// message readable.
func quoteShort(s string) string {
	const max = 80
	if len(s) > max {
		return strconv.Quote(s[:max]) + fmt.Sprintf("… (%d bytes)", len(s))
	}
	return strconv.Quote(s)
}
