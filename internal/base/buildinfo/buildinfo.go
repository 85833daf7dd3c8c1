// Package buildinfo is what the Go toolchain stamped into the running binary: the main module's
// version, the VCS revision and commit time, whether the tree was modified, and the Go version.
// Both binaries print it for --version and a replica exports it as qlsched_build_info, from this
// one reading, so the two always agree.
package buildinfo

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// Unknown stands for a value the build did not stamp (a test binary, -buildvcs=false, a build
// outside a repository).
const Unknown = "unknown"

// Info is a binary's build information.
type Info struct {
	// Version is the main module's version: a tag (v1.2.3), a pseudo-version derived from the
	// VCS (v0.0.0-20261205034500-abcdef012345, +dirty when modified), or "(devel)".
	Version string `json:"version"`
	// Revision is the VCS commit (vcs.revision), Time its commit time (vcs.time, RFC 3339).
	Revision string `json:"revision"`
	Time     string `json:"revision_time"`
	// Modified: the working tree differed from Revision when the binary was built.
	Modified  bool   `json:"modified"`
	GoVersion string `json:"go_version"`
}

// Read returns the running binary's build information.
func Read() Info { return FromBuildInfo(debug.ReadBuildInfo()) }

// FromBuildInfo extracts an Info; ok false (no build information) gives Unknown everywhere.
func FromBuildInfo(bi *debug.BuildInfo, ok bool) Info {
	info := Info{Version: Unknown, Revision: Unknown, Time: Unknown, GoVersion: Unknown}
	if !ok || bi == nil {
		return info
	}
	if bi.Main.Version != "" {
		info.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.time":
			info.Time = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// String is the --version line of binary: "qlsched v1.2.3 (revision abc…, 2026-12-05T03:45:00Z,
// modified) go1.26.0".
func (i Info) String(binary string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s (revision %s, %s", binary, i.Version, i.Revision, i.Time)
	if i.Modified {
		b.WriteString(", modified")
	}
	fmt.Fprintf(&b, ") %s", i.GoVersion)
	return b.String()
}

// Labels are the metric labels of a build_info gauge: the fields of String, by name.
func (i Info) Labels() map[string]string {
	return map[string]string{
		"version": i.Version, "revision": i.Revision, "revision_time": i.Time,
		"modified": fmt.Sprint(i.Modified), "goversion": i.GoVersion,
	}
}
