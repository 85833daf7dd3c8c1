package workerproto

import (
	"fmt"
	"net"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"
)

// Bounds of protocol v1. The dispatcher refuses what exceeds them (400, 413); the worker
// library keeps inside them before it sends.
const (
	MaxBodyBytes       = 64 << 10 // every request body (413 too_large above it)
	OutputTailMaxBytes = 8192     // CompleteRequest.OutputTail, bytes of UTF-8
	MaxMessageBytes    = 1024     // AttemptError.Message and ErrorDetail.Message
	MaxReasonBytes     = 256      // RejectRequest.Reason
	MinCapacity        = 1
	MaxCapacity        = 256 // also the most leases one heartbeat lists and offers one poll asks for
	MaxLabels          = 16
	MaxLabelKeyBytes   = 63
	MaxLabelValueBytes = 63
	MaxLabelsTextBytes = 2048   // worker_sessions.labels CHECK: octet_length(labels::text)
	MaxPollWaitMs      = 60_000 // the largest poll_max_wait_ms a dispatcher may be configured with
	PollTimeoutSlackMs = 5_000  // a poll's HTTP timeout is at least wait_ms + this
	MaxDurationMs      = 1<<53 - 1
)

// NamePattern is a worker name (the worker_sessions.worker_id it registers with) and a label key.
const NamePattern = `^[a-z0-9][a-z0-9_.-]{0,62}$`

// LabelValuePattern is a label value: printable, no quoting needed in JSON, 1 … 63 bytes.
const LabelValuePattern = `^[A-Za-z0-9_.:/+=-]{1,63}$`

var (
	nameRE       = regexp.MustCompile(NamePattern)
	labelValueRE = regexp.MustCompile(LabelValuePattern)
)

// ValidName reports whether s matches NamePattern.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// FieldError is a value out of bounds. Field is the JSON key path ("labels.zone"); Message says
// what was wanted and never repeats a secret value.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// ValidateLabels checks a label set: ≤ MaxLabels, keys NamePattern, values LabelValuePattern, and
// the text PostgreSQL stores for it (`{"k": "v", …}`) within MaxLabelsTextBytes.
func ValidateLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fieldErr("labels", "%d labels, at most %d", len(labels), MaxLabels)
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	text := 2 // {}
	for i, k := range keys {
		if !nameRE.MatchString(k) {
			return fieldErr("labels", "key %q does not match %s", k, NamePattern)
		}
		v := labels[k]
		if !labelValueRE.MatchString(v) {
			return fieldErr("labels."+k, "value does not match %s", LabelValuePattern)
		}
		text += len(k) + len(v) + 6 // "k": "v"
		if i > 0 {
			text += 2 // ", "
		}
	}
	if text > MaxLabelsTextBytes {
		return fieldErr("labels", "%d bytes as stored, at most %d", text, MaxLabelsTextBytes)
	}
	return nil
}

// Validate checks a registration against the bounds of protocol v1.
func (r *RegisterRequest) Validate() error {
	if !nameRE.MatchString(r.Name) {
		return fieldErr("name", "must match %s", NamePattern)
	}
	if r.Capacity < MinCapacity || r.Capacity > MaxCapacity {
		return fieldErr("capacity", "%d, want %d…%d", r.Capacity, MinCapacity, MaxCapacity)
	}
	if r.Protocol != Version {
		return fieldErr("protocol", "%d, want %d", r.Protocol, Version)
	}
	return ValidateLabels(r.Labels)
}

// Validate checks a poll's own bounds (the session's poll_max_wait_ms is the dispatcher's).
func (r *PollRequest) Validate() error {
	// 0 is refused rather than read as "the longest": a client that meant "do not wait" learns
	// at once that a poll always waits (the first offer or the deadline answers it).
	if r.WaitMs < 1 || r.WaitMs > MaxPollWaitMs {
		return fieldErr("wait_ms", "%d, want 1…%d", r.WaitMs, MaxPollWaitMs)
	}
	if r.MaxOffers < 1 || r.MaxOffers > MaxCapacity {
		return fieldErr("max_offers", "%d, want 1…%d", r.MaxOffers, MaxCapacity)
	}
	return nil
}

// Validate checks a reject's reason.
func (r *RejectRequest) Validate() error {
	if len(r.Reason) > MaxReasonBytes || !ValidText(r.Reason) {
		return fieldErr("reason", "at most %d bytes of UTF-8 without NUL", MaxReasonBytes)
	}
	return nil
}

// Validate checks a heartbeat's list length and versions.
func (r *HeartbeatRequest) Validate() error {
	if len(r.Leases) > MaxCapacity {
		return fieldErr("leases", "%d leases, at most %d", len(r.Leases), MaxCapacity)
	}
	for i, l := range r.Leases {
		if l.LeaseVersion < 1 {
			return fieldErr(fmt.Sprintf("leases[%d].lease_version", i), "%d, want ≥ 1", l.LeaseVersion)
		}
	}
	return nil
}

// ValidOutcome reports whether s is one of the four outcomes.
func ValidOutcome(s string) bool {
	switch s {
	case OutcomeSucceeded, OutcomeFailed, OutcomeCancelled, OutcomeHandedBack:
		return true
	}
	return false
}

// ValidKind reports whether s is one of the error kinds.
func ValidKind(s string) bool {
	switch s {
	case KindExitStatus, KindTimeout, KindSpawn, KindBadSpec, KindCancelled, KindLeaseLost, KindHandler:
		return true
	}
	return false
}

// Validate checks a completion: a known outcome, an error exactly when the outcome is failed
// (optional for cancelled and handed_back, absent for succeeded), bounded message and tail.
func (r *CompleteRequest) Validate() error {
	if !ValidOutcome(r.Outcome) {
		return fieldErr("outcome", "%q, want succeeded, failed, cancelled or handed_back", r.Outcome)
	}
	if r.LeaseVersion < 1 {
		return fieldErr("lease_version", "%d, want ≥ 1", r.LeaseVersion)
	}
	switch {
	case r.Outcome == OutcomeFailed && r.Error == nil:
		return fieldErr("error", "required when the outcome is failed")
	case r.Outcome == OutcomeSucceeded && r.Error != nil:
		return fieldErr("error", "not allowed when the outcome is succeeded")
	}
	if r.Error != nil {
		if !ValidKind(r.Error.Kind) {
			return fieldErr("error.kind", "%q is not an error kind", r.Error.Kind)
		}
		if len(r.Error.Message) > MaxMessageBytes || !ValidText(r.Error.Message) {
			return fieldErr("error.message", "at most %d bytes of UTF-8 without NUL", MaxMessageBytes)
		}
	}
	if len(r.Signal) > 32 || !ValidText(r.Signal) {
		return fieldErr("signal", "at most 32 bytes of UTF-8 without NUL")
	}
	if len(r.OutputTail) > OutputTailMaxBytes || !ValidText(r.OutputTail) {
		return fieldErr("output_tail", "at most %d bytes of UTF-8 without NUL", OutputTailMaxBytes)
	}
	if r.DurationMs < 0 || r.DurationMs > MaxDurationMs {
		return fieldErr("duration_ms", "%d, want 0…%d", r.DurationMs, int64(MaxDurationMs))
	}
	return nil
}

// Loopback reports whether host names this machine's loopback interface: the one place plaintext
// may carry a worker token (the dispatcher's --listen and the worker's --dispatcher).
func Loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ValidText reports whether s is text the dispatcher can store: valid UTF-8 without NUL (a JSON
// string may hold "\u0000"; a PostgreSQL jsonb value may not).
func ValidText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// StorableText is s with invalid UTF-8 and NUL each replaced by U+FFFD: what a worker reports
// of a job's output and errors, so a report is never refused for the bytes a job printed.
func StorableText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// TruncateUTF8 returns at most max bytes of s, cut at a rune boundary, for messages and reasons.
func TruncateUTF8(s string, max int) string {
	if len(s) <= max {
		return s
	}
	for max > 0 && !utf8.RuneStart(s[max]) {
		max--
	}
	return s[:max]
}
