package metrics

import (
	"maps"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/qlcontrol/controlcore/internal/base/buildinfo"
)

// buildInfoGauge is qlsched_build_info: always 1, labelled with what `qlsched --version` prints
// (version, revision, revision_time, modified, goversion), so a dashboard can tell which build
// each replica runs.
func buildInfoGauge(info buildinfo.Info, constLabels prometheus.Labels) prometheus.Collector {
	labels := maps.Clone(constLabels)
	maps.Copy(labels, info.Labels())
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "qlsched_build_info", ConstLabels: labels,
		Help: "Always 1; the labels say which build runs: module version, VCS revision and time, modified tree, Go version."})
	g.Set(1)
	return g
}
