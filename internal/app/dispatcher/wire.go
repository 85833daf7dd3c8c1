package dispatcher

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

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
// in that form. The scheme is case-insensitive (RFC 9110 §11.1).
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// decode reads exactly one JSON object of at most maxBody bytes into v, refusing fields v does
// not have: a worker speaking a newer protocol learns it at once instead of having a field
// silently dropped. An empty body decodes as {} (drain, close).
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
	if len(strings.TrimSpace(string(raw))) == 0 {
		raw = []byte("{}")
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if dec.More() {
		return errorf(http.StatusBadRequest, workerproto.CodeBadRequest, "request body holds more than one JSON value")
	}
	if _, err := dec.Token(); err != io.EOF {
		return errorf(http.StatusBadRequest, workerproto.CodeBadRequest, "request body holds more than one JSON value")
	}
	return nil
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

// fieldName is whether s looks like a protocol key (snake_case, short): only such names are
// echoed in an error message.
func fieldName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.') {
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
