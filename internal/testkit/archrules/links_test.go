package archrules

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mdLink is a Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// The README and docs/ name only files that exist (a relative link that points nowhere is a doc
// that no longer matches the tree), and the README points to the Apache-2.0 LICENSE.
func TestDocsLinksResolve(t *testing.T) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, filepath.Join(root, "README.md"))
	for _, doc := range docs {
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllSubmatch(text, -1) {
			target := string(m[1])
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			if _, err := os.Stat(filepath.Join(filepath.Dir(doc), target)); err != nil {
				t.Errorf("%s links to %s, which does not exist", strings.TrimPrefix(doc, root+"/"), target)
			}
		}
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "](LICENSE)") {
		t.Error("README.md does not point to LICENSE")
	}
	license, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	if err != nil || !strings.Contains(string(license), "Apache License") || !strings.Contains(string(license), "Version 2.0, January 2004") {
		t.Errorf("LICENSE is not the Apache License 2.0 text (%v)", err)
	}
}
