package process

import (
	"strings"
	"testing"
)

// The ring buffer keeps the last TailBytes bytes of everything written, whatever the sizes of
// the writes (a pipe hands over anything from one byte to its whole buffer at once).
func TestRingKeepsTheLastBytes(t *testing.T) {
	var all strings.Builder
	for i := 0; all.Len() < 40_000; i++ {
		all.WriteString(strings.Repeat(string(rune('a'+i%26)), 1+i%97))
	}
	data := all.String()
	for _, chunk := range []int{1, 7, 100, 4096, TailBytes - 1, TailBytes, TailBytes + 1, 30_000} {
		r := newRing(TailBytes)
		for p := data; len(p) > 0; {
			n := min(chunk, len(p))
			if _, err := r.Write([]byte(p[:n])); err != nil {
				t.Fatal(err)
			}
			p = p[n:]
		}
		got, cut := r.tail()
		if want := data[len(data)-TailBytes:]; got != want || !cut {
			t.Fatalf("writes of %d bytes: tail of %d bytes (cut %v) is not the last %d bytes", chunk, len(got), cut, TailBytes)
		}
	}
	r := newRing(TailBytes)
	_, _ = r.Write([]byte("short"))
	if got, cut := r.tail(); got != "short" || cut {
		t.Fatalf("tail = %q (cut %v), want the whole short output", got, cut)
	}
}

// A tail cut inside a multi-byte character starts at the next whole one and is valid UTF-8.
func TestRingTailStartsAtARune(t *testing.T) {
	r := newRing(TailBytes)
	// 12,000 bytes of 3-byte characters: the last 8192 begin 1 byte into one (8192 = 3 × 2730 + 2).
	_, _ = r.Write([]byte(strings.Repeat("€", 4000)))
	got, cut := r.tail()
	if !cut || got != strings.Repeat("€", 2730) {
		t.Fatalf("tail starts %q, %d bytes, cut %v: want the 2730 whole characters (8190 bytes)", got[:6], len(got), cut)
	}
}
