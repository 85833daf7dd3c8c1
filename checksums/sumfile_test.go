package checksums_test

import (
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/qlcontrol/controlcore/checksums"
	"github.com/qlcontrol/controlcore/sql/migrations"
)

// The committed integrity file matches the committed migrations, and the binary's embedded copy
// of both matches too (verify's integrity check).
func TestCommittedAndEmbeddedStreamsMatchTheirSum(t *testing.T) {
	t.Parallel()
	problems, err := checksums.CheckSum(os.DirFS("../sql/migrations"))
	if err != nil || len(problems) != 0 {
		t.Errorf("sql/migrations: %v %v; run `qlmigrate hash` and commit migrations.sum", problems, err)
	}
	problems, err = checksums.CheckSum(migrations.FS)
	if err != nil || len(problems) != 0 {
		t.Errorf("embedded stream: %v %v", problems, err)
	}
	list, err := checksums.Load(migrations.FS)
	if err != nil || len(list) != 29 {
		t.Fatalf("Load: %d migrations, %v", len(list), err)
	}
}

func TestCompareSumNamesEachKindOfChange(t *testing.T) {
	t.Parallel()
	base := fstest.MapFS{
		"0001_a.sql": {Data: []byte("a")},
		"0002_b.sql": {Data: []byte("b")},
		"0003_c.sql": {Data: []byte("c")},
	}
	sum, err := checksums.ComputeSum(base)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := checksums.ParseSum(sum.Bytes())
	if err != nil || len(parsed.Entries) != 3 || parsed.Sum != sum.Sum {
		t.Fatalf("ParseSum(Bytes()) = %+v, %v", parsed, err)
	}
	cases := []struct {
		name   string
		change func(fstest.MapFS)
		want   []string // "kind file"
	}{
		{"nothing", func(fstest.MapFS) {}, nil},
		{"edited", func(m fstest.MapFS) { m["0002_b.sql"] = &fstest.MapFile{Data: []byte("b2")} }, []string{"edited 0002_b.sql"}},
		{"added", func(m fstest.MapFS) { m["0004_d.sql"] = &fstest.MapFile{Data: []byte("d")} }, []string{"added 0004_d.sql"}},
		{"removed", func(m fstest.MapFS) { delete(m, "0003_c.sql") }, []string{"removed 0003_c.sql"}},
		{"renamed", func(m fstest.MapFS) { m["0003_see.sql"] = m["0003_c.sql"]; delete(m, "0003_c.sql") }, []string{"renamed 0003_see.sql"}},
		{"edited and added", func(m fstest.MapFS) {
			m["0001_a.sql"] = &fstest.MapFile{Data: []byte("A")}
			m["0009_z.sql"] = &fstest.MapFile{Data: []byte("z")}
		}, []string{"edited 0001_a.sql", "added 0009_z.sql"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := fstest.MapFS{}
			for k, v := range base {
				m[k] = v
			}
			c.change(m)
			actual, err := checksums.ComputeSum(m)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range checksums.CompareSum(parsed, actual) {
				got = append(got, string(p.Kind)+" "+p.File)
				if p.Kind == checksums.SumRenamed && p.From != "0003_c.sql" {
					t.Errorf("renamed from %q, want 0003_c.sql", p.From)
				}
			}
			if strings.Join(got, ",") != strings.Join(c.want, ",") {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
	t.Run("list edited by hand", func(t *testing.T) {
		t.Parallel()
		tampered := strings.Replace(string(sum.Bytes()), "0002_b.sql", "0002_x.sql", 1)
		listed, err := checksums.ParseSum([]byte(tampered))
		if err != nil {
			t.Fatal(err)
		}
		problems := checksums.CompareSum(listed, sum)
		if len(problems) == 0 || problems[0].Kind != checksums.SumTampered {
			t.Errorf("want sum_edited first, got %+v", problems)
		}
	})
	for _, bad := range []string{"", "nope\n", "h1:x\n0001_a.sql\n", "h1:x\n0001_a.sql h1:y\n0001_a.sql h1:y\n"} {
		if _, err := checksums.ParseSum([]byte(bad)); err == nil {
			t.Errorf("ParseSum(%q) accepted a malformed file", bad)
		}
	}
}
