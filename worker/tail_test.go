package worker_test

import (
	"testing"

	"github.com/qlcontrol/controlcore/worker"
	"github.com/qlcontrol/controlcore/workerproto"
)

// What a job printed never makes its report unstorable: invalid UTF-8 and NUL (which jsonb
// refuses) become U+FFFD, and the tail stays within its bound and valid for the protocol.
func TestTailIsAlwaysStorableText(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"nul", "ok\x00done", "ok\uFFFDdone"},
		{"invalid utf-8", "a\xff\xfeb", "a\uFFFDb"},
		{"plain", "hello", "hello"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, cut := worker.TailUTF8(tc.in, workerproto.OutputTailMaxBytes)
			if got != tc.want || cut || !workerproto.ValidText(got) {
				t.Errorf("TailUTF8(%q) = %q, %v; want %q, false, storable", tc.in, got, cut, tc.want)
			}
		})
	}
}
