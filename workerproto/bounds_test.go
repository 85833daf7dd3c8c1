package workerproto

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func TestRegisterValidate(t *testing.T) {
	many := map[string]string{}
	for i := 0; i <= MaxLabels; i++ {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	// 16 labels of 63-byte keys and values: more than the 2048 bytes the column holds.
	wide := map[string]string{}
	for i := 0; i < MaxLabels; i++ {
		wide[fmt.Sprintf("%02d", i)+strings.Repeat("k", 61)] = strings.Repeat("v", 63)
	}
	cases := []struct {
		name  string
		req   RegisterRequest
		field string // "" = valid
	}{
		{"ok", RegisterRequest{Name: "w1", Capacity: 4, Labels: map[string]string{"zone": "a", "gpu": "true"}, Protocol: 1}, ""},
		{"capacity 256", RegisterRequest{Name: "w1", Capacity: 256, Protocol: 1}, ""},
		{"capacity 0", RegisterRequest{Name: "w1", Capacity: 0, Protocol: 1}, "capacity"},
		{"capacity 257", RegisterRequest{Name: "w1", Capacity: 257, Protocol: 1}, "capacity"},
		{"name upper", RegisterRequest{Name: "W1", Capacity: 1, Protocol: 1}, "name"},
		{"name empty", RegisterRequest{Name: "", Capacity: 1, Protocol: 1}, "name"},
		{"name 64", RegisterRequest{Name: strings.Repeat("a", 64), Capacity: 1, Protocol: 1}, "name"},
		{"protocol 2", RegisterRequest{Name: "w1", Capacity: 1, Protocol: 2}, "protocol"},
		{"17 labels", RegisterRequest{Name: "w1", Capacity: 1, Protocol: 1, Labels: many}, "labels"},
		{"label key", RegisterRequest{Name: "w1", Capacity: 1, Protocol: 1, Labels: map[string]string{"Zone": "a"}}, "labels"},
		{"label value quote", RegisterRequest{Name: "w1", Capacity: 1, Protocol: 1, Labels: map[string]string{"zone": `a"`}}, "labels.zone"},
		{"labels too wide", RegisterRequest{Name: "w1", Capacity: 1, Protocol: 1, Labels: wide}, "labels"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.req.Validate()
			var fe *FieldError
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case tc.field != "" && !errors.As(err, &fe):
				t.Fatalf("Validate = %v, want a FieldError on %s", err, tc.field)
			case tc.field != "" && fe.Field != tc.field:
				t.Fatalf("field = %q, want %q (%v)", fe.Field, tc.field, err)
			}
		})
	}
}

func TestCompleteValidate(t *testing.T) {
	zero := 0
	ok := CompleteRequest{SessionID: "s", CallbackToken: "c", LeaseVersion: 1, Outcome: OutcomeSucceeded, ExitCode: &zero, DurationMs: 5}
	with := func(f func(*CompleteRequest)) CompleteRequest { r := ok; f(&r); return r }
	cases := []struct {
		name  string
		req   CompleteRequest
		field string
	}{
		{"ok", ok, ""},
		{"tail at bound", with(func(r *CompleteRequest) { r.OutputTail = strings.Repeat("x", OutputTailMaxBytes) }), ""},
		{"tail over", with(func(r *CompleteRequest) { r.OutputTail = strings.Repeat("x", OutputTailMaxBytes+1) }), "output_tail"},
		{"tail not utf8", with(func(r *CompleteRequest) { r.OutputTail = "\xff" }), "output_tail"},
		{"bad outcome", with(func(r *CompleteRequest) { r.Outcome = "done" }), "outcome"},
		{"failed without error", with(func(r *CompleteRequest) { r.Outcome = OutcomeFailed }), "error"},
		{"succeeded with error", with(func(r *CompleteRequest) { r.Error = &AttemptError{Kind: KindHandler} }), "error"},
		{"bad kind", with(func(r *CompleteRequest) { r.Outcome = OutcomeFailed; r.Error = &AttemptError{Kind: "oops"} }), "error.kind"},
		{"long message", with(func(r *CompleteRequest) {
			r.Outcome = OutcomeFailed
			r.Error = &AttemptError{Kind: KindSpawn, Message: strings.Repeat("m", MaxMessageBytes+1)}
		}), "error.message"},
		{"lease version 0", with(func(r *CompleteRequest) { r.LeaseVersion = 0 }), "lease_version"},
		{"negative duration", with(func(r *CompleteRequest) { r.DurationMs = -1 }), "duration_ms"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.req.Validate()
			var fe *FieldError
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case tc.field != "" && !errors.As(err, &fe):
				t.Fatalf("Validate = %v, want a FieldError on %s", err, tc.field)
			case tc.field != "" && fe.Field != tc.field:
				t.Fatalf("field = %q, want %q (%v)", fe.Field, tc.field, err)
			}
		})
	}
}

func TestTruncateUTF8KeepsRunes(t *testing.T) {
	s := strings.Repeat("é", 10) // 2 bytes each
	got := TruncateUTF8(s, 5)
	if got != "éé" {
		t.Fatalf("TruncateUTF8 = %q, want %q", got, "éé")
	}
}

func TestStatusOf(t *testing.T) {
	for code, want := range map[string]int{
		CodeUnauthorized: http.StatusUnauthorized, CodeLeaseLost: http.StatusConflict,
		CodeSessionGone: http.StatusGone, CodeTooLarge: http.StatusRequestEntityTooLarge,
		CodeUnavailable: http.StatusServiceUnavailable, CodeUnsupportedVersion: http.StatusNotFound,
	} {
		if got := StatusOf(code); got != want {
			t.Errorf("StatusOf(%s) = %d, want %d", code, got, want)
		}
	}
}
