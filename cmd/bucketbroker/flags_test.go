package main

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// subcommand finds the command at path under a fresh root.
func subcommand(t *testing.T, path ...string) *cobra.Command {
	t.Helper()
	cmd, rest, err := newRootCommand().Find(path)
	if err != nil || len(rest) != 0 {
		t.Fatalf("find %v: %v %v", path, rest, err)
	}
	return cmd
}

// TestStorageFlagsDeclaredOnce: every command that takes a storage or
// store flag gives it the same default and the same help text, so that
// the commands cannot drift apart again.
func TestStorageFlagsDeclaredOnce(t *testing.T) {
	backend := [][]string{{"serve"}, {"controller"}, {"admin", "audit"}}
	storeOnly := [][]string{{"serve"}, {"admin", "audit"}, {"admin", "migrate"}, {"admin", "records"}, {"admin", "records", "repair"}}
	for _, tc := range []struct {
		flags    []string
		commands [][]string
	}{
		{[]string{"driver", "data-dir", "s3-listen", "iam-listen", "s3-max-connections", "iam-max-connections", "s3-endpoint", "iam-endpoint", "region", "path-style", "name-prefix"}, backend},
		{[]string{"public-s3-endpoint"}, [][]string{{"serve"}, {"controller"}}},
		{[]string{"pprof-listen"}, [][]string{{"serve"}, {"controller"}, {"admin", "audit"}}},
		{[]string{"store", "data-dir"}, storeOnly},
		{[]string{"upstream", "upstream-config", "bucket-service"}, [][]string{{"serve"}, {"admin", "audit"}}},
	} {
		for _, name := range tc.flags {
			var first *pflag.Flag
			for _, path := range tc.commands {
				f := subcommand(t, path...).Flags().Lookup(name)
				if f == nil {
					t.Errorf("%v has no --%s", path, name)
					continue
				}
				if first == nil {
					first = f
					continue
				}
				if f.Usage != first.Usage || f.DefValue != first.DefValue {
					t.Errorf("--%s of %v differs from %v's: %q (default %q), want %q (default %q)",
						name, path, tc.commands[0], f.Usage, f.DefValue, first.Usage, first.DefValue)
				}
			}
		}
	}
}

func TestPprofAddress(t *testing.T) {
	for flag, want := range map[string]string{
		":6060":          "127.0.0.1:6060",
		"0.0.0.0:6060":   "0.0.0.0:6060",
		"localhost:6060": "localhost:6060",
		"[::1]:6060":     "[::1]:6060",
	} {
		if got, err := pprofAddress(flag); err != nil || got != want {
			t.Errorf("pprofAddress(%q) = %q, %v, want %q", flag, got, err, want)
		}
	}
	for _, bad := range []string{"6060", "host", "a:b:c"} {
		if _, err := pprofAddress(bad); err == nil || !strings.Contains(err.Error(), "--pprof-listen") {
			t.Errorf("pprofAddress(%q) = %v, want an error naming --pprof-listen", bad, err)
		}
	}
}

// TestPprofOffByDefault: neither serve, controller nor admin audit serves
// profiles unless asked.
func TestPprofOffByDefault(t *testing.T) {
	for _, path := range [][]string{{"serve"}, {"controller"}, {"admin", "audit"}} {
		if f := subcommand(t, path...).Flags().Lookup("pprof-listen"); f == nil || f.DefValue != "" {
			t.Errorf("%v --pprof-listen: %v, want a flag that defaults to off", path, f)
		}
	}
	if p, err := startPprof("", nil); p != nil || err != nil {
		t.Errorf("startPprof(\"\") = %v, %v, want nothing started", p, err)
	}
}

// TestPprofRejectedBeforeStarting: a --pprof-listen without a port fails
// serve and controller before they start anything.
func TestPprofRejectedBeforeStarting(t *testing.T) {
	for _, cmd := range []string{"serve", "controller"} {
		_, err := run(cmd, "--pprof-listen", "6060")
		if err == nil || !strings.Contains(err.Error(), "--pprof-listen") {
			t.Errorf("%s --pprof-listen 6060: %v, want an error naming --pprof-listen", cmd, err)
		}
	}
}

// TestPprofServer: a host-less address listens on loopback; the server
// serves the profiling endpoints and nothing else (not the default mux).
func TestPprofServer(t *testing.T) {
	http.HandleFunc("/bucketbroker-test-default-mux", func(w http.ResponseWriter, _ *http.Request) {})
	p, err := startPprof(":0", discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer stopPprof(p, discardLogger())
	addr := p.Addr().(*net.TCPAddr)
	if !addr.IP.IsLoopback() {
		t.Errorf("--pprof-listen :0 listens on %s, want loopback", addr)
	}
	base := "http://" + addr.String()
	for path, want := range map[string]int{
		"/debug/pprof/":                  http.StatusOK,
		"/debug/pprof/goroutine?debug=1": http.StatusOK,
		"/debug/pprof/cmdline":           http.StatusOK,
		"/debug/pprof/symbol":            http.StatusOK,
		"/bucketbroker-test-default-mux": http.StatusNotFound,
		"/metrics":                       http.StatusNotFound,
		"/v2/catalog":                    http.StatusNotFound,
	} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	if err := p.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(base + "/debug/pprof/"); err == nil {
		t.Error("the pprof server still answers after Stop")
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
