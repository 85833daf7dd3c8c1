package dispatcher

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/qlcontrol/controlcore/workerproto"
)

// maxBody bounds every request body (§4): a worker's largest legitimate request, a completion
// with an 8 KiB output tail, fits many times over.
const maxBody = workerproto.MaxBodyBytes

// apiError is one protocol error: the status and the body's code and message. Messages are
// built from fixed text and field names only: never a token, a spec or a request body.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.status, e.code, e.message) }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

// fail is the error of code, with its one status (workerproto.StatusOf).
func fail(code, format string, args ...any) *apiError {
	return errorf(workerproto.StatusOf(code), code, format, args...)
}

// bearer returns the token of an "Authorization: Bearer …" header, or "" when there is none
// in that form. The scheme is case-insensitive (RFC 9110 §11.1). A request with more than one
// Authorization header is refused before this (twoAuthorizations): which one counts is ambiguous.
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// twoAuthorizations reports whether r carries more than one Authorization header.
func twoAuthorizations(r *http.Request) bool { return len(r.Header.Values("Authorization")) > 1 }

// maxDepth bounds the nesting of a request body: the deepest request (a heartbeat's lease list)
// nests 3 deep.
const maxDepth = 16

// decode reads exactly one JSON object of at most maxBody bytes into v, strictly: every key must
// be one of v's JSON names exactly (encoding/json alone would take "Capacity" for "capacity")
// and appear once (it would keep the last), so a worker speaking a newer protocol, or a buggy
// one, learns it at once instead of having a field silently dropped or replaced; the body must be
// UTF-8 and its strings whole Unicode (encoding/json would store U+FFFD for either). An empty
// body decodes as {} (drain, close). Every endpoint decodes this one way.
func decode(w http.ResponseWriter, r *http.Request, v any) *apiError {
	body := http.MaxBytesReader(w, r.Body, maxBody)
	raw, err := io.ReadAll(body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return errorf(http.StatusRequestEntityTooLarge, workerproto.CodeTooLarge, "request body over %d bytes", maxBody)
		}
		return errorf(http.StatusBadRequest, workerproto.CodeBadRequest, "request body could not be read")
	}
	return decodeBytes(raw, v)
}

// decodeBytes is decode after the body was read (the fuzz target calls it directly).
func decodeBytes(raw []byte, v any) *apiError {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = []byte("{}")
	}
	if !utf8.Valid(raw) {
		return errorf(http.StatusBadRequest, workerproto.CodeBadRequest, "request body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // a number is only scanned here; its range is Unmarshal's to judge
	if e := strictValue(dec, reflect.TypeOf(v), "", 0); e != nil {
		return e
	}
	if _, err := dec.Token(); err != io.EOF {
		return errorf(http.StatusBadRequest, workerproto.CodeBadRequest, "request body holds more than one JSON value")
	}
	if loneSurrogate(raw) {
		return errorf(http.StatusBadRequest, workerproto.CodeBadRequest, "request body holds a string that is not valid Unicode (a lone \\u surrogate)")
	}
	strict := json.NewDecoder(bytes.NewReader(raw))
	strict.DisallowUnknownFields()
	if err := strict.Decode(v); err != nil {
		return decodeError(err)
	}
	return nil
}

// strictValue reads one JSON value from dec, checking the keys of every object against t, the Go
// type it will be decoded into (nil: anything): a struct's keys must be its JSON names exactly, a
// map's keys are free; in both no key may appear twice. A value of the wrong type is left to
// Unmarshal to refuse. path is the key path for messages ("leases[].attempt_id").
func strictValue(dec *json.Decoder, t reflect.Type, path string, depth int) *apiError {
	if depth > maxDepth {
		return errorf(http.StatusBadRequest, workerproto.CodeBadRequest, "request body nests deeper than %d", maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return tokenError(err)
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch tok {
	case json.Delim('['):
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for dec.More() {
			if e := strictValue(dec, elem, path+"[]", depth+1); e != nil {
				return e
			}
		}
	case json.Delim('{'):
		var fields map[string]reflect.Type
		var elem reflect.Type
		if t != nil && t.Kind() == reflect.Struct {
			fields = jsonFields(t)
		} else if t != nil && t.Kind() == reflect.Map {
			elem = t.Elem()
		}
		seen := map[string]bool{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return tokenError(err)
			}
			key, _ := kt.(string)
			name := join(path, key)
			if seen[key] {
				if !fieldName(key) {
					return errorf(http.StatusBadRequest, workerproto.CodeBadRequest, "request body repeats a key")
				}
				return errorf(http.StatusBadRequest, workerproto.CodeBadRequest, "duplicate key %q", name)
			}
			seen[key] = true
			ft := elem
			if fields != nil {
				var ok bool
				if ft, ok = fields[key]; !ok {
					return unknownField(name, key, fields)
				}
			}
			if e := strictValue(dec, ft, name, depth+1); e != nil {
				return e
			}
		}
	default:
		return nil // a scalar
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return tokenError(err)
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// jsonFields maps t's JSON names to their types (exported fields; the name before any option).
func jsonFields(t reflect.Type) map[string]reflect.Type {
	m := make(map[string]reflect.Type, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		m[name] = f.Type
	}
	return m
}

// unknownField names a key the type does not have, and the key it differs from only in case.
func unknownField(name, key string, fields map[string]reflect.Type) *apiError {
	if !fieldName(key) {
		return errorf(http.StatusBadRequest, workerproto.CodeUnknownField, "request body has an unknown field")
	}
	for f := range fields {
		if strings.EqualFold(f, key) {
			return errorf(http.StatusBadRequest, workerproto.CodeUnknownField, "unknown field %q (keys are case-sensitive: %q)", name, f)
		}
	}
	return errorf(http.StatusBadRequest, workerproto.CodeUnknownField, "unknown field %q", name)
}

// tokenError is a tokeniser's error in decodeError's terms (truncated input ends in io.EOF).
func tokenError(err error) *apiError {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return decodeError(err)
}

// loneSurrogate reports whether a string of the JSON text raw (already tokenised: valid JSON)
// holds a \u escape of half a UTF-16 surrogate pair, which encoding/json decodes as U+FFFD.
func loneSurrogate(raw []byte) bool {
	in := false
	for i := 0; i < len(raw); i++ {
		switch {
		case raw[i] == '"':
			in = !in
		case raw[i] == '\\' && in:
			if i+5 >= len(raw) || raw[i+1] != 'u' {
				i++ // a one-character escape
				continue
			}
			r := hex4(raw[i+2 : i+6])
			switch {
			case r >= 0xDC00 && r <= 0xDFFF:
				return true
			case r >= 0xD800 && r <= 0xDBFF:
				if i+11 >= len(raw) || raw[i+6] != '\\' || raw[i+7] != 'u' {
					return true
				}
				if lo := hex4(raw[i+8 : i+12]); lo < 0xDC00 || lo > 0xDFFF {
					return true
				}
				i += 6
			}
			i += 5
		}
	}
	return false
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		}
	}
	return r
}

// decodeError says what was wrong with a body by position and field name only: encoding/json's
// own messages may quote the offending value.
func decodeError(err error) *apiError {
	var (
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &syntax):
		return errorf(http.StatusBadRequest, workerproto.CodeBadRequest, "request body is not valid JSON (at byte %d)", syntax.Offset)
	case errors.As(err, &typ):
		if typ.Field != "" {
			return errorf(http.StatusBadRequest, workerproto.CodeBadRequest, "field %q: want a JSON %s", typ.Field, typ.Type.Kind())
		}
		return errorf(http.StatusBadRequest, workerproto.CodeBadRequest, "request body: want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(http.StatusBadRequest, workerproto.CodeBadRequest, "request body is truncated JSON")
	}
	// encoding/json has no type for an unknown field; its message is `json: unknown field "x"`,
	// and the name comes from the request, so it is quoted back only when it looks like a key.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name = strings.Trim(name, `"`)
		if !fieldName(name) {
			return errorf(http.StatusBadRequest, workerproto.CodeUnknownField, "request body has an unknown field")
		}
		return errorf(http.StatusBadRequest, workerproto.CodeUnknownField, "unknown field %q", name)
	}
	return errorf(http.StatusBadRequest, workerproto.CodeBadRequest, "request body does not match the request's schema")
}

// fieldName is whether s looks like a protocol key (snake_case or a miscased one, short): only such names are
// echoed in an error message.
func fieldName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// writeJSON answers status with v as the body.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store") // offers carry callback tokens
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers e; a 401 carries the challenge and no detail (§4).
func writeError(w http.ResponseWriter, e *apiError) {
	if e.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", workerproto.AuthenticateHeader)
		writeJSON(w, e.status, workerproto.ErrorBody{Error: workerproto.ErrorDetail{Code: workerproto.CodeUnauthorized}})
		return
	}
	writeJSON(w, e.status, workerproto.ErrorBody{Error: workerproto.ErrorDetail{Code: e.code, Message: e.message}})
}
