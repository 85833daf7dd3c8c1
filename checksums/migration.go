package checksums

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/qlcontrol/controlcore/internal/base/sqlfile"
)

// Migration is one migration file as the binary knows it.
type Migration struct {
	Version int64  // from the digits before the first "_"
	File    string // 0014_cluster_scheduler_admission.sql
	Name    string // pg-0014-cluster-scheduler-admission
	SHA256  string // hex sha256 of the file's bytes, as committed
	// Normal is the hex sha256 of the file's normal form (internal/base/sqlfile): equal for two
	// files that differ only in comments and whitespace, different when a statement differs.
	Normal string
}

var fileName = regexp.MustCompile(`^([0-9]{4})_([a-z0-9]+(?:_[a-z0-9]+)*)\.sql$`)

// NameOf turns a migration file name into its report name: 0014_cluster_scheduler_admission.sql
// becomes pg-0014-cluster-scheduler-admission.
func NameOf(file string) (string, error) {
	m := fileName.FindStringSubmatch(file)
	if m == nil {
		return "", fmt.Errorf("migration file %q: want NNNN_lower_snake_slug.sql", file)
	}
	return "pg-" + m[1] + "-" + strings.ReplaceAll(m[2], "_", "-"), nil
}

// Load reads every *.sql file at the root of fsys, in version order. Versions must be unique.
func Load(fsys fs.FS) ([]Migration, error) {
	files, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	out := make([]Migration, 0, len(files))
	seen := map[int64]string{}
	for _, f := range files {
		name, err := NameOf(f)
		if err != nil {
			return nil, err
		}
		version, _ := strconv.ParseInt(f[:4], 10, 64)
		if other, dup := seen[version]; dup {
			return nil, fmt.Errorf("migrations %s and %s share version %d", other, f, version)
		}
		seen[version] = f
		body, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", f, err)
		}
		sum := sha256.Sum256(body)
		normal, err := sqlfile.NormalSHA256(string(body))
		if err != nil {
			return nil, fmt.Errorf("migration %s: %w", f, err)
		}
		out = append(out, Migration{Version: version, File: f, Name: name, SHA256: hex.EncodeToString(sum[:]), Normal: normal})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}
