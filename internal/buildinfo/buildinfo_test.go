package buildinfo

import (
	"runtime/debug"
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
			ok: true, want: Info{Version: "unknown", Commit: "abc123-dirty", GoVersion: "go1.26.8"}},
		"ldflags win": {reason: "a release build's -X values override what the linker stamped",
			bi: stamped, ok: true, version: "v9.9.9", commit: "fff", want: Info{Version: "v9.9.9", Commit: "fff", GoVersion: "go1.26.8"}},
		"nothing known": {reason: "no build info reads unknown, never empty",
			want: Info{Version: "unknown", Commit: "unknown", GoVersion: "unknown"}},
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
