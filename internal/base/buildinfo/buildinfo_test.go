package buildinfo_test

import (
	"runtime/debug"
	"testing"

	"github.com/qlcontrol/controlcore/internal/base/buildinfo"
)

// What the toolchain stamps becomes the --version line and the metric labels; what it does not
// stamp is "unknown", never "".
func TestFromBuildInfo(t *testing.T) {
	t.Parallel()
	stamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/qlcontrol/controlcore", Version: "v0.0.0-20261205034624-9ee89555276e+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "9ee89555276ec78428a0d9399caa449ed8e9560b"},
			{Key: "vcs.time", Value: "2026-12-05T03:46:24Z"}, {Key: "vcs.modified", Value: "true"}}}
	for _, c := range []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		line string
	}{
		{"stamped", stamped, true, "qlsched v0.0.0-20261205034624-9ee89555276e+dirty (revision 9ee89555276ec78428a0d9399caa449ed8e9560b, 2026-12-05T03:46:24Z, modified) go1.26.8"},
		{"no vcs", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, true, "qlsched (devel) (revision unknown, unknown) go1.26.8"},
		{"no build info", nil, false, "qlsched unknown (revision unknown, unknown) unknown"},
	} {
		info := buildinfo.FromBuildInfo(c.bi, c.ok)
		if got := info.String("qlsched"); got != c.line {
			t.Errorf("%s: %q, want %q", c.name, got, c.line)
		}
		for k, v := range info.Labels() {
			if v == "" {
				t.Errorf("%s: label %s is empty", c.name, k)
			}
		}
	}
	if l := buildinfo.FromBuildInfo(stamped, true).Labels(); l["revision"] != "9ee89555276ec78428a0d9399caa449ed8e9560b" || l["modified"] != "true" ||
		l["revision_time"] != "2026-12-05T03:46:24Z" || l["goversion"] != "go1.26.8" || l["version"] != stamped.Main.Version || len(l) != 5 {
		t.Errorf("labels %v", l)
	}
}
