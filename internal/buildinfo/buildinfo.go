package buildinfo

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/mod/module"
)

// Release is the version this tree is: what a build reports unless the
// linker stamps another (a tagged module version or -ldflags). The chart's
// appVersion and image tag and the default image name follow it
// (TestChartFollowsRelease; the Makefile and hack/image.sh read it here).
const Release = "0.1.0"

// Set with -ldflags -X at release builds (see the package comment).
var (
	version string
	commit  string
)

const unknown = "unknown"

// Info describes the running binary.
type Info struct {
	// Version is the version set with -ldflags, else the module's tagged
	// version (v1.2.3), else Release.
	Version string
	// Commit is the git commit, with "-dirty" when the tree had changes.
	Commit string
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

// Get reads the running binary's build information.
func Get() Info {
	return fromBuildInfo(debug.ReadBuildInfo())
}

func fromBuildInfo(bi *debug.BuildInfo, ok bool) Info {
	in := Info{Version: version, Commit: commit}
	if ok {
		in.GoVersion = bi.GoVersion
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" && !module.IsPseudoVersion(strings.TrimSuffix(bi.Main.Version, "+dirty")) {
			in.Version = bi.Main.Version
		}
		if in.Commit == "" {
			var rev string
			var modified bool
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					modified = s.Value == "true"
				}
			}
			if rev != "" && modified {
				rev += "-dirty"
			}
			in.Commit = rev
		}
	}
	if in.Version == "" {
		in.Version = Release
	}
	for _, s := range []*string{&in.Version, &in.Commit, &in.GoVersion} {
		if *s == "" {
			*s = unknown
		}
	}
	return in
}

// String is the line `bucketbroker version` prints.
func (in Info) String() string {
	return fmt.Sprintf("bucketbroker %s (commit %s, %s)", in.Version, in.Commit, in.GoVersion)
}

// Collector is the bucketbroker_build_info gauge: always 1, with the
// build's version, commit (label revision, as Prometheus' own build_info
// names it) and Go version as labels, so that a dashboard can tell which
// build each process runs.
func (in Info) Collector() prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "bucketbroker_build_info",
		Help:        "A metric with a constant '1' value labeled by the version, commit (revision) and Go version bucketbroker was built from.",
		ConstLabels: prometheus.Labels{"version": in.Version, "revision": in.Commit, "goversion": in.GoVersion},
	})
	g.Set(1)
	return g
}
