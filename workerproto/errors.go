package workerproto

import "net/http"

// Error codes of the error body. Each has one HTTP status (StatusOf).
const (
	CodeBadRequest         = "bad_request"         // 400: bad JSON or a value out of bounds (message names the field)
	CodeUnknownField       = "unknown_field"       // 400: a key the type does not have (message names it)
	CodeUnauthorized       = "unauthorized"        // 401: missing, wrong or revoked token; no detail
	CodeNotFound           = "not_found"           // 404: no such session/offer/attempt for this token
	CodeUnsupportedVersion = "unsupported_version" // 404: a path of another protocol version
	CodeMethodNotAllowed   = "method_not_allowed"  // 405
	CodeSessionDraining    = "session_draining"    // 409: poll of a draining session
	CodeOfferGone          = "offer_gone"          // 409: offer expired, withdrawn or rejected
	CodeRunCancelled       = "run_cancelled"       // 409: ack of a cancelled Run; a completion refused
	CodeLeaseLost          = "lease_lost"          // 409: lease expired, foreign or of an old version
	CodeLeasesActive       = "leases_active"       // 409: close while leases are active
	CodeTooManySessions    = "too_many_sessions"   // 409: register while the token holds its bound of live sessions
	CodeSessionGone        = "session_gone"        // 410: session expired or closed (every lease lost)
	CodeTooLarge           = "too_large"           // 413: body over MaxBodyBytes
	CodeUnsupportedMedia   = "unsupported_media"   // 415: not application/json
	CodeUnavailable        = "unavailable"         // 503: database error, dispatcher stopping; retryable
)

// StatusOf is the HTTP status the dispatcher answers a code with (500 for an unknown code).
func StatusOf(code string) int {
	switch code {
	case CodeBadRequest, CodeUnknownField:
		return http.StatusBadRequest
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeNotFound, CodeUnsupportedVersion:
		return http.StatusNotFound
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case CodeSessionDraining, CodeOfferGone, CodeRunCancelled, CodeLeaseLost, CodeLeasesActive, CodeTooManySessions:
		return http.StatusConflict
	case CodeSessionGone:
		return http.StatusGone
	case CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeUnsupportedMedia:
		return http.StatusUnsupportedMediaType
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// ErrorBody is every error response: {"error":{"code":"…","message":"…"}}. A 401 carries no
// message. Messages never contain a token, a callback token or a spec.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of ErrorBody.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

// AuthenticateHeader is the WWW-Authenticate value of every 401.
const AuthenticateHeader = `Bearer realm="qlsched"`

// ErrorCodes lists every error code (the schema's enum; a test holds them equal).
var ErrorCodes = []string{
	CodeBadRequest, CodeUnknownField, CodeUnauthorized, CodeNotFound, CodeUnsupportedVersion,
	CodeMethodNotAllowed, CodeSessionDraining, CodeOfferGone, CodeRunCancelled, CodeLeaseLost,
	CodeLeasesActive, CodeTooManySessions, CodeSessionGone, CodeTooLarge, CodeUnsupportedMedia, CodeUnavailable,
}
