package dispatcher

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/qlcontrol/controlcore/workerproto"
)

// requestTypes are the bodies of every endpoint, in the order the fuzz input's first byte picks.
var requestTypes = []func() any{
	func() any { return &workerproto.RegisterRequest{} },
	func() any { return &workerproto.PollRequest{} },
	func() any { return &workerproto.AckRequest{} },
	func() any { return &workerproto.RejectRequest{} },
	func() any { return &workerproto.HeartbeatRequest{} },
	func() any { return &workerproto.CompleteRequest{} },
	func() any { return &workerproto.DrainRequest{} },
}

// FuzzProtocolRequest runs every endpoint's decoding and validation (the one rule readBody
// applies) on arbitrary bodies: it never panics; a refusal is a 4xx whose body is a JSON error
// with a known code; an accepted body re-encodes to one that is accepted again as the same value.
func FuzzProtocolRequest(f *testing.F) {
	sid := "0b8e3c52-6c3e-4a8e-9a51-2f0f1f1f3a10"
	seeds := []string{
		``, `{}`, `[]`, `null`, `"x"`, `1`, `{"a":1} {}`, `{"a":`, "\xff", `{"k":"\ud800"}`, `{"k":"\ud83d\ude00"}`,
		`{"name":"w1","capacity":4,"labels":{"zone":"a"},"protocol":1}`, `{"name":"w1","Capacity":4,"protocol":1}`,
		`{"name":"w1","capacity":4,"capacity":5,"protocol":1}`, `{"labels":{"z":"a","z":"b"}}`, `{"capacity":1e400}`,
		`{"wait_ms":25000,"max_offers":4}`, `{"wait_ms":0,"max_offers":1}`,
		`{"session_id":"` + sid + `","callback_token":"qlc_x"}`, `{"session_id":"` + sid + `","callback_token":"qlc_x","reason":"busy"}`,
		`{"leases":[{"attempt_id":"` + sid + `","lease_version":1}]}`, `{"leases":[{"attempt_id":"x","lease_version":0}]}`,
		`{"session_id":"` + sid + `","callback_token":"qlc_x","lease_version":1,"outcome":"failed","exit_code":3,"error":{"kind":"exit_status","message":"m"},"output_tail":"a\u00e9\n","output_truncated":true,"duration_ms":41}`,
		`{"outcome":"succeeded","lease_version":1,"output_tail":"\u0000"}`, `{"a":` + string(make([]byte, 0)) + `[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]}`,
	}
	for _, s := range seeds {
		for i := range requestTypes {
			f.Add(byte(i), []byte(s))
		}
	}
	codes := map[string]bool{}
	for _, c := range workerproto.ErrorCodes {
		codes[c] = true
	}
	f.Fuzz(func(t *testing.T, which byte, body []byte) {
		newReq := requestTypes[int(which)%len(requestTypes)]
		req := newReq()
		e := check(body, req)
		if e != nil {
			rec := httptest.NewRecorder()
			writeError(rec, e)
			var eb workerproto.ErrorBody
			if rec.Code/100 != 4 {
				t.Fatalf("refused with %d %s; want a 4xx", rec.Code, rec.Body)
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &eb); err != nil || !codes[eb.Error.Code] || eb.Error.Message == "" {
				t.Fatalf("refusal body %q: not a JSON error with a known code and a message", rec.Body)
			}
			return
		}
		raw, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("accepted %q, cannot re-encode: %v", body, err)
		}
		again := newReq()
		if e := check(raw, again); e != nil {
			t.Fatalf("accepted %q, its re-encoding %s refused: %v", body, raw, e)
		}
		// Compared as encoded: an empty map and none are the same request ({} and an absent key).
		if raw2, _ := json.Marshal(again); !bytes.Equal(raw, raw2) {
			t.Fatalf("accepted %q as %s; its re-encoding reads %s", body, raw, raw2)
		}
	})
}

// check is readBody without the HTTP request: decode, then the type's own bounds.
func check(body []byte, req any) *apiError {
	if e := decodeBytes(body, req); e != nil {
		return e
	}
	return bounds(req)
}
