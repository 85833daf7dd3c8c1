package process_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/qlcontrol/controlcore/worker/process"
	"github.com/qlcontrol/controlcore/workerproto"
)

// Any spec bytes: no panic; a refusal is a valid protocol message that quotes no long value (a
// short plain word, like a misspelt key, it may); an accepted spec names a program.
func FuzzParseSpec(f *testing.F) {
	long := strings.Repeat("s3cr3t", 12) // longer than a name a message may quote
	for _, seed := range []string{
		`{"command":["echo","hi"],"env":{"A":"b"},"dir":"/tmp","timeout":"30s"}`,
		`{"command":[]}`, `{"command":"echo"}`, `{"command":["x"],"timeout":"-1s"}`, `{"command":["x"],"` + long + `":1}`,
		`{"command":["x"],"env":{"A=B":"c"}}`, `[]`, `null`, ``, `{"command":["x"]} {}`, "{\"command\":[\"\\u0000\"]}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		spec, _, err := process.ParseSpec(raw)
		if err == nil {
			if len(spec.Command) == 0 || spec.Command[0] == "" {
				t.Fatalf("accepted a spec without a program: %q", raw)
			}
			return
		}
		msg := err.Error()
		if !utf8.ValidString(msg) || len(msg) > workerproto.MaxMessageBytes {
			t.Fatalf("message of %d bytes, valid UTF-8 %v", len(msg), utf8.ValidString(msg))
		}
		if strings.Contains(msg, long) {
			t.Fatalf("message %q quotes a long spec value", msg)
		}
	})
}
