package checksums

import "fmt"

// ReleasedText is a text of a migration that a landed release applied and a later release
// replaced before the migration was frozen: a database that ran it holds that text's sha256 in
// its ledger. It is not an edit after the fact (the statements that ran are known, byte for byte,
// in checksums/testdata), so verify and up report it as a note, not changed_checksum, and name
// the migration after which such a database has the same schema as one that ran the file in this
// binary. Any other sha256 of the version is still changed_checksum.
type ReleasedText struct {
	Version int64
	// SHA256 is the hex sha256 of the released file's bytes, as that release's ledger records it
	// (Migration.SHA256, RecordSQL).
	SHA256 string
	// Release names the release and the commit that shipped the text.
	Release string
	// Why says how the text differs from the file in this binary.
	Why string
	// SameStateAfter is the version of the migration after which a database that ran this text
	// has the schema of one that ran the file in this binary.
	SameStateAfter int64
}

// ReleasedTexts is every released text the ledger check accepts. Each entry is proved by
// TestReleasedTextsAreTheReleasesFiles against the file kept in checksums/testdata/<commit>.
var ReleasedTexts = []ReleasedText{
	{Version: 20, SHA256: "ab571a18b6905a199d191d7df57be8de535cf42c9cadd3f6c1ec77fa9eeb7b9a",
		Release: "the stop-43 release (f1634fb)",
		Why: "its first text created trigger_schedules_project_due_idx and lacked runs_keep_live_attempt; " +
			"pg-0021 drops the index and creates the trigger on both texts",
		SameStateAfter: 21},
	{Version: 21, SHA256: "4e5b3d479f3b8c2a52d691b6882774d961a421b37411057299dcdbf299762d11",
		Release: "the stop-43 release (f1634fb)",
		Why: "its first text dropped the index and created runs_keep_live_attempt without IF EXISTS and OR REPLACE, " +
			"after pg-0020's first text; it ends in the same schema as the text in this binary",
		SameStateAfter: 21},
	{Version: 23, SHA256: "3cb8515aba0701bd6d9cf5b7692541b8d69a714d0b812c06746656a3461cf79b",
		Release: "the stop-43 release (f1634fb)",
		Why: "its first text dropped pg-0022's 5-argument retry_at_ms at once; the text in this binary keeps it " +
			"until pg-0028 drops it (expand, then contract)",
		SameStateAfter: 28},
}

// ReleasedTextOf returns the released text of version whose ledger sha256 is sha256, if any.
func ReleasedTextOf(version int64, sha256 string) (ReleasedText, bool) {
	for _, r := range ReleasedTexts {
		if r.Version == version && r.SHA256 == sha256 {
			return r, true
		}
	}
	return ReleasedText{}, false
}

// releasedNote is the ledger check's note for a migration that ran as released text r.
func releasedNote(m Migration, r ReleasedText, byName map[int64]string) Drift {
	after := byName[r.SameStateAfter]
	if after == "" {
		after = fmt.Sprintf("version %d", r.SameStateAfter)
	}
	same := fmt.Sprintf("%s brings its schema to the same state", after)
	if r.SameStateAfter == m.Version {
		same = "its schema is already the same"
	}
	return Drift{Kind: "released_text", Object: m.Name, Note: true,
		Message: fmt.Sprintf("ran as an earlier released text, shipped by %s: ledger sha256 %s, the file in this binary has %s; %s; %s",
			r.Release, short(r.SHA256), short(m.SHA256), r.Why, same),
		Fix: "nothing to do: not drift (checksums.ReleasedTexts documents the text)"}
}
