package checksums

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

// SumFileName is the integrity file committed beside the migrations (and embedded with them).
const SumFileName = "migrations.sum"

// The integrity file, in the spirit of atlas.sum:
//
//	h1:<base64 sha256 of every line below, each with its newline>
//	0001_bootstrap.sql h1:<base64 sha256 of the file's bytes>
//	…
//
// one line per *.sql file at the root of the migrations folder, in file-name (= version) order.
// The first line makes a hand edit of the list itself detectable; the per-file lines make an
// edited, added, removed or renamed migration detectable in the repository, before any database
// is touched. `qlmigrate hash` writes it, `qlmigrate hash --check` and `qlmigrate verify` check it.

// SumEntry is one file line of the integrity file.
type SumEntry struct {
	File string // 0014_cluster_scheduler_admission.sql
	Hash string // h1:<base64 sha256>
}

// SumFile is the integrity file's content.
type SumFile struct {
	Sum     string // h1:<base64 sha256 over the file lines>
	Entries []SumEntry
}

func h1(b []byte) string {
	s := sha256.Sum256(b)
	return "h1:" + base64.StdEncoding.EncodeToString(s[:])
}

func entriesBytes(entries []SumEntry) []byte {
	var b bytes.Buffer
	for _, e := range entries {
		fmt.Fprintf(&b, "%s %s\n", e.File, e.Hash)
	}
	return b.Bytes()
}

// Bytes renders the file as it is committed.
func (s SumFile) Bytes() []byte {
	return append([]byte(s.Sum+"\n"), entriesBytes(s.Entries)...)
}

// ComputeSum hashes every *.sql file at the root of fsys.
func ComputeSum(fsys fs.FS) (SumFile, error) {
	files, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return SumFile{}, fmt.Errorf("list migrations: %w", err)
	}
	sort.Strings(files)
	entries := make([]SumEntry, 0, len(files))
	for _, f := range files {
		body, err := fs.ReadFile(fsys, f)
		if err != nil {
			return SumFile{}, fmt.Errorf("read migration %s: %w", f, err)
		}
		entries = append(entries, SumEntry{File: f, Hash: h1(body)})
	}
	return SumFile{Sum: h1(entriesBytes(entries)), Entries: entries}, nil
}

// ParseSum reads an integrity file. It checks the syntax only; CheckSum compares.
func ParseSum(b []byte) (SumFile, error) {
	var s SumFile
	sc := bufio.NewScanner(bytes.NewReader(b))
	line := 0
	seen := map[string]bool{}
	for sc.Scan() {
		line++
		text := sc.Text()
		if line == 1 {
			if !strings.HasPrefix(text, "h1:") || strings.ContainsAny(text, " \t") {
				return SumFile{}, fmt.Errorf("%s line 1: want h1:<base64 sha256>, got %q", SumFileName, text)
			}
			s.Sum = text
			continue
		}
		file, hash, ok := strings.Cut(text, " ")
		if !ok || file == "" || !strings.HasPrefix(hash, "h1:") || strings.ContainsAny(hash, " \t") {
			return SumFile{}, fmt.Errorf("%s line %d: want <file> h1:<base64 sha256>, got %q", SumFileName, line, text)
		}
		if seen[file] {
			return SumFile{}, fmt.Errorf("%s line %d: %s is listed twice", SumFileName, line, file)
		}
		seen[file] = true
		s.Entries = append(s.Entries, SumEntry{File: file, Hash: hash})
	}
	if err := sc.Err(); err != nil {
		return SumFile{}, err
	}
	if line == 0 {
		return SumFile{}, fmt.Errorf("%s is empty", SumFileName)
	}
	return s, nil
}

// SumProblemKind names what is wrong between the migration files and the integrity file.
type SumProblemKind string

const (
	SumEdited    SumProblemKind = "edited"     // the file's bytes differ from its line
	SumAdded     SumProblemKind = "added"      // a file the integrity file does not list
	SumRemoved   SumProblemKind = "removed"    // a listed file that is gone
	SumRenamed   SumProblemKind = "renamed"    // a listed file gone and an unlisted one with its exact bytes
	SumTampered  SumProblemKind = "sum_edited" // the first line does not match the file lines: the list was edited by hand
	SumMissing   SumProblemKind = "missing"    // there is no integrity file
	SumMalformed SumProblemKind = "malformed"  // the integrity file cannot be read
)

// SumProblem is one difference, naming the file.
type SumProblem struct {
	Kind SumProblemKind `json:"kind"`
	File string         `json:"file"`               // the file on disk (for removed: the listed one)
	From string         `json:"from,omitempty"`     // renamed: the name the integrity file lists
	Want string         `json:"expected,omitempty"` // the hash the integrity file lists
	Got  string         `json:"actual,omitempty"`   // the hash of the file's bytes
	Err  string         `json:"error,omitempty"`    // malformed: why
}

func (p SumProblem) String() string {
	switch p.Kind {
	case SumEdited:
		return fmt.Sprintf("%s was edited: %s lists %s, the file hashes to %s", p.File, SumFileName, p.Want, p.Got)
	case SumAdded:
		return fmt.Sprintf("%s was added: %s does not list it", p.File, SumFileName)
	case SumRemoved:
		return fmt.Sprintf("%s was removed: %s lists it, the file is gone", p.File, SumFileName)
	case SumRenamed:
		return fmt.Sprintf("%s was renamed to %s (same bytes, new name: a migration's name and version never change)", p.From, p.File)
	case SumTampered:
		return fmt.Sprintf("%s was edited by hand: its first line %s does not match its file lines (%s)", SumFileName, p.Want, p.Got)
	case SumMissing:
		return fmt.Sprintf("%s is missing", SumFileName)
	default:
		return fmt.Sprintf("%s cannot be read: %s", SumFileName, p.Err)
	}
}

// CheckSum compares the *.sql files at the root of fsys with the integrity file beside them and
// returns every difference (none: the stream is exactly what was hashed and committed).
func CheckSum(fsys fs.FS) ([]SumProblem, error) {
	raw, err := fs.ReadFile(fsys, SumFileName)
	if errors.Is(err, fs.ErrNotExist) {
		return []SumProblem{{Kind: SumMissing, File: SumFileName}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", SumFileName, err)
	}
	listed, err := ParseSum(raw)
	if err != nil {
		return []SumProblem{{Kind: SumMalformed, File: SumFileName, Err: err.Error()}}, nil
	}
	actual, err := ComputeSum(fsys)
	if err != nil {
		return nil, err
	}
	return CompareSum(listed, actual), nil
}

// CompareSum lists the differences between the integrity file (listed) and the files (actual).
func CompareSum(listed, actual SumFile) []SumProblem {
	var problems []SumProblem
	if got := h1(entriesBytes(listed.Entries)); got != listed.Sum {
		problems = append(problems, SumProblem{Kind: SumTampered, File: SumFileName, Want: listed.Sum, Got: got})
	}
	want := make(map[string]string, len(listed.Entries))
	for _, e := range listed.Entries {
		want[e.File] = e.Hash
	}
	have := make(map[string]string, len(actual.Entries))
	for _, e := range actual.Entries {
		have[e.File] = e.Hash
	}
	var added, removed []SumEntry
	for _, e := range actual.Entries {
		w, ok := want[e.File]
		switch {
		case !ok:
			added = append(added, e)
		case w != e.Hash:
			problems = append(problems, SumProblem{Kind: SumEdited, File: e.File, Want: w, Got: e.Hash})
		}
	}
	for _, e := range listed.Entries {
		if _, ok := have[e.File]; !ok {
			removed = append(removed, e)
		}
	}
	// A removed and an added file with the same bytes is a rename (or a reorder: a new version).
	for _, a := range added {
		renamed := false
		for i, r := range removed {
			if r.Hash == a.Hash {
				problems = append(problems, SumProblem{Kind: SumRenamed, File: a.File, From: r.File, Want: r.Hash, Got: a.Hash})
				removed = append(removed[:i], removed[i+1:]...)
				renamed = true
				break
			}
		}
		if !renamed {
			problems = append(problems, SumProblem{Kind: SumAdded, File: a.File, Got: a.Hash})
		}
	}
	for _, r := range removed {
		problems = append(problems, SumProblem{Kind: SumRemoved, File: r.File, Want: r.Hash})
	}
	return problems
}
