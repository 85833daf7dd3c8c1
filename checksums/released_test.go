package checksums_test

import (
	"os"
	"strings"
	"testing"

	"github.com/qlcontrol/controlcore/checksums"
	"github.com/qlcontrol/controlcore/sql/migrations"
)

// Each released text is the file its release shipped, kept byte for byte in testdata/<commit>
// (git show f1634fb:sql/migrations/…): the table's sha256 is that file's, computed as the ledger
// computes it (Load: the hex sha256 of the bytes), and differs from the file in this binary.
func TestReleasedTextsAreTheReleasesFiles(t *testing.T) {
	old, err := checksums.Load(os.DirFS("testdata/f1634fb"))
	if err != nil {
		t.Fatal(err)
	}
	now, err := checksums.Load(migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	byVersion := map[int64]checksums.Migration{}
	for _, m := range now {
		byVersion[m.Version] = m
	}
	if len(old) != len(checksums.ReleasedTexts) {
		t.Fatalf("testdata/f1634fb holds %d files, the table %d entries", len(old), len(checksums.ReleasedTexts))
	}
	for i, m := range old {
		r := checksums.ReleasedTexts[i]
		if r.Version != m.Version || r.SHA256 != m.SHA256 {
			t.Errorf("entry %d: version %d sha256 %s; testdata has %s with %s", i, r.Version, r.SHA256, m.File, m.SHA256)
		}
		cur, ok := byVersion[m.Version]
		if !ok || cur.SHA256 == m.SHA256 || cur.Name != m.Name {
			t.Errorf("%s: the binary's file (%+v) must have the same name and another sha256", m.File, cur)
		}
		if r.Release == "" || r.Why == "" || !strings.Contains(r.Release, "f1634fb") {
			t.Errorf("entry %d names no release or reason: %+v", i, r)
		}
		if _, ok := byVersion[r.SameStateAfter]; !ok || r.SameStateAfter < r.Version {
			t.Errorf("entry %d: SameStateAfter %d is no later migration of the stream", i, r.SameStateAfter)
		}
	}
}

// A released text is a note naming the release and the migration that converges; any other
// sha256, or a released sha256 under another version, is still changed_checksum.
func TestStreamDriftAcceptsOnlyTheReleasedTexts(t *testing.T) {
	list, err := checksums.Load(migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	stream := func(version int64, sha string) checksums.Stream {
		var s checksums.Stream
		for _, m := range list {
			row := checksums.LedgerRow{Version: m.Version, Name: m.Name, SHA256: m.SHA256, Normal: m.Normal}
			if m.Version == version {
				row.SHA256, row.Normal = sha, strings.Repeat("b", 64)
			}
			s.Applied, s.Ledger = append(s.Applied, m.Version), append(s.Ledger, row)
		}
		return s
	}
	released23 := checksums.ReleasedTexts[2].SHA256
	for _, tc := range []struct {
		name    string
		version int64
		sha     string
		kind    string
		note    bool
		want    []string
	}{
		{"pg-0023 as released by f1634fb", 23, released23, "released_text", true,
			[]string{"ran as an earlier released text", "f1634fb", "pg-0028-retry-contract-register-refusal brings its schema to the same state"}},
		{"pg-0020 as released by f1634fb", 20, checksums.ReleasedTexts[0].SHA256, "released_text", true,
			[]string{"pg-0021-live-attempt-guard brings its schema to the same state"}},
		{"pg-0021 as released by f1634fb", 21, checksums.ReleasedTexts[1].SHA256, "released_text", true,
			[]string{"its schema is already the same"}},
		{"pg-0023 with another sha256", 23, strings.Repeat("c", 64), "changed_checksum", false, []string{"changed (statements)"}},
		{"pg-0022 with pg-0023's released sha256", 22, released23, "changed_checksum", false, []string{"changed (statements)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ledger, unknown, pending := checksums.StreamDrift(list, stream(tc.version, tc.sha))
			if len(ledger) != 1 || len(unknown) != 0 || len(pending) != 0 {
				t.Fatalf("ledger %+v, unknown %+v, pending %+v; want one ledger finding", ledger, unknown, pending)
			}
			d := ledger[0]
			if d.Kind != tc.kind || d.Note != tc.note {
				t.Errorf("finding %s (note %v), want %s (note %v): %s", d.Kind, d.Note, tc.kind, tc.note, d.Message)
			}
			for _, w := range tc.want {
				if !strings.Contains(d.Message, w) {
					t.Errorf("message %q lacks %q", d.Message, w)
				}
			}
		})
	}
}
