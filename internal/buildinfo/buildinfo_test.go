package buildinfo

import (
	"os"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

func TestFromBuildInfo(t *testing.T) {
	stamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "false"}}}
	for name, tc := range map[string]struct {
		reason          string
		bi              *debug.BuildInfo
		ok              bool
		version, commit string
		want            Info
	}{
		"stamped": {reason: "a module build in a git checkout names its version and commit",
			bi: stamped, ok: true, want: Info{Version: "v1.2.3", Commit: "abc123", GoVersion: "go1.26.8"}},
		"dirty tree": {reason: "a build with uncommitted changes says so",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
				Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}},
			ok: true, want: Info{Version: Release, Commit: "abc123-dirty", GoVersion: "go1.26.8"}},
		"pseudo-version": {reason: "a checkout's build is the release this tree is, not the pseudo-version Go derives from the commit",
			bi: &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261202120000-abcdefabcdef+dirty"}},
			ok: true, want: Info{Version: Release, Commit: "unknown", GoVersion: "go1.26.8"}},
		"ldflags win": {reason: "a release build's -X values override what the linker stamped",
			bi: stamped, ok: true, version: "v9.9.9", commit: "fff", want: Info{Version: "v9.9.9", Commit: "fff", GoVersion: "go1.26.8"}},
		"nothing known": {reason: "no build info reads the release and unknown, never empty",
			want: Info{Version: Release, Commit: "unknown", GoVersion: "unknown"}},
	} {
		t.Run(name, func(t *testing.T) {
			version, commit = tc.version, tc.commit
			defer func() { version, commit = "", "" }()
			if diff := cmp.Diff(tc.want, fromBuildInfo(tc.bi, tc.ok)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(Info{Version: "v1.2.3", Commit: "abc123", GoVersion: "go1.26.8"}.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != "bucketbroker_build_info" || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v, want one bucketbroker_build_info sample", mfs)
	}
	m := mfs[0].GetMetric()[0]
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	if diff := cmp.Diff(map[string]string{"version": "v1.2.3", "revision": "abc123", "goversion": "go1.26.8"}, got); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if v := m.GetGauge().GetValue(); v != 1 {
		t.Errorf("value = %v, want 1", v)
	}
}

// TestChartFollowsRelease: the chart's appVersion and default image tag,
// the Makefile's and hack/image.sh's default image, and the rendered
// manager manifest are the release this tree is.
func TestChartFollowsRelease(t *testing.T) {
	for file, want := range map[string]string{
		"../../charts/bucketbroker/Chart.yaml":  "appVersion: \"" + Release + "\"",
		"../../charts/bucketbroker/values.yaml": "tag: \"" + Release + "\"",
		"../../config/manager/manager.yaml":     "image: bucketbroker:" + Release,
	} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), want) {
			t.Errorf("%s does not say %s", file, want)
		}
	}
	for _, file := range []string{"../../Makefile", "../../hack/image.sh"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "internal/buildinfo/buildinfo.go") {
			t.Errorf("%s does not take the image's tag from buildinfo.Release", file)
		}
	}
}
