package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/audit"
	"github.com/bucketbroker/bucketbroker/internal/broker"
	"github.com/bucketbroker/bucketbroker/internal/driver/s3iam"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/storage"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// runAuditCmd runs the CLI with stdin and separate stdout and stderr, and
// reports whether it asked to exit with the drift status.
func runAuditCmd(t *testing.T, stdin string, args ...string) (stdout, stderr string, drift bool, err error) {
	t.Helper()
	saved := exitDrift
	exitDrift = func() { drift = true }
	defer func() { exitDrift = saved }()
	cmd := newRootCommand()
	var out, errOut bytes.Buffer
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	err = cmd.Execute()
	return out.String(), errOut.String(), drift, err
}

// TestAdminAudit runs `admin audit` on the data dir of a stopped serve
// with the embedded server: JSON output, the drift status, the refusal to
// fix without a terminal or --yes, and --fix --yes.
func TestAdminAudit(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b, err := broker.Start(ctx, broker.Config{Listen: "127.0.0.1:0", Config: storage.Config{DataDir: dir, S3Listen: "127.0.0.1:0", IAMListen: "127.0.0.1:0"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Engine().Provision(ctx, engine.ProvisionRequest{InstanceID: "i1",
		ServiceID: "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b01", PlanID: "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b11"})
	if err != nil {
		t.Fatalf("provision: %v", err)
	}
	leak := driver.BucketName("bb", "instance", "leaked")
	drv, err := s3iam.New(s3iam.Config{S3Endpoint: b.S3Endpoint, IAMEndpoint: b.IAMEndpoint, PathStyle: true,
		AccessKeyID: b.RootAccessKey, SecretAccessKey: b.RootSecretKey})
	if err != nil {
		t.Fatal(err)
	}
	if err := drv.EnsureBucket(ctx, driver.BucketSpec{Name: leak, Owner: driver.OwnerMark("instance", "leaked")}); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := b.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}

	args := []string{"admin", "audit", "--data-dir", dir, "--s3-listen", "127.0.0.1:0", "--iam-listen", "127.0.0.1:0"}
	type row struct {
		Kind  audit.Kind
		Name  string
		Fixed bool
	}
	findings := func(t *testing.T, out string) []row {
		t.Helper()
		var rep audit.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("--output json printed no JSON report: %v\n%s", err, out)
		}
		var rows []row
		for _, f := range rep.Findings {
			rows = append(rows, row{f.Kind, f.Name, f.Fixed})
		}
		return rows
	}

	out, stderr, drift, err := runAuditCmd(t, "", append(args, "--output", "json")...)
	if err != nil {
		t.Fatalf("audit --output json: %v\n%s", err, stderr)
	}
	if diff := cmp.Diff([]row{{audit.KindLeak, leak, false}}, findings(t, out)); diff != "" {
		t.Errorf("audit --output json findings: -want +got:\n%s", diff)
	}
	if !drift {
		t.Errorf("audit with a leak did not exit with the drift status")
	}

	_, _, drift, err = runAuditCmd(t, "y\n", append(args, "--fix")...)
	if err == nil || !strings.Contains(err.Error(), "--yes") {
		t.Errorf("audit --fix without a terminal: err = %v, want a refusal naming --yes", err)
	}
	if drift {
		t.Errorf("a refused --fix reported drift instead of an error")
	}

	// The leak is still there after the refusal: this run finds and fixes it.
	out, stderr, drift, err = runAuditCmd(t, "", append(args, "--fix", "--yes", "--output", "json")...)
	if err != nil {
		t.Fatalf("audit --fix --yes: %v\n%s", err, stderr)
	}
	if diff := cmp.Diff([]row{{audit.KindLeak, leak, true}}, findings(t, out)); diff != "" {
		t.Errorf("audit --fix --yes findings: -want +got:\n%s", diff)
	}
	if drift {
		t.Errorf("audit --fix --yes fixed everything but exited with the drift status")
	}

	// With the profiling endpoints (--pprof-listen): on loopback, the
	// address said on standard error, the report alone on standard output.
	out, stderr, drift, err = runAuditCmd(t, "", append(args, "--pprof-listen", ":0")...)
	if err != nil || drift || !strings.Contains(out, "No drift") {
		t.Errorf("audit after the fix: drift %v, err %v, output:\n%s\nwant no drift", drift, err, out)
	}
	if !strings.Contains(stderr, "Serving pprof") || !strings.Contains(stderr, "http://127.0.0.1:") || strings.Contains(out, "pprof") {
		t.Errorf("audit --pprof-listen :0: standard error\n%s\nstandard output\n%s\nwant the loopback address of the profiles on standard error only", stderr, out)
	}
}

func TestAdminAuditRefuses(t *testing.T) {
	// Embedded server data, with a store (withData) or without (lostStore).
	withData, lostStore := t.TempDir(), t.TempDir()
	st, err := broker.OpenStore(t.Context(), "", withData)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{withData, lostStore} {
		if err := os.MkdirAll(filepath.Join(dir, "s3"), 0o700); err != nil {
			t.Fatal(err)
		}
		creds := `{"accessKey":"BBROOTAUDITTEST01","secretKey":"secretsecretsecretsecretsecretsecret"}`
		if err := os.WriteFile(filepath.Join(dir, "s3-root-credentials.json"), []byte(creds), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()

	for name, tc := range map[string]struct {
		reason string
		args   []string
		want   string
	}{
		"PortsTaken": {
			reason: "a running serve holds the embedded server's ports: point the audit at it instead",
			args:   []string{"--data-dir", withData, "--s3-listen", taken.Addr().String(), "--iam-listen", "127.0.0.1:0"},
			want:   "--driver s3iam --s3-endpoint http://" + taken.Addr().String(),
		},
		"LostStore": {
			reason: "embedded data without its store: the store was lost, and an audit against an empty one would take every bucket for a leak",
			args:   []string{"--data-dir", lostStore, "--s3-listen", "127.0.0.1:0", "--iam-listen", "127.0.0.1:0"},
			want:   "the store is empty, but records were kept before",
		},
		"NoEmbeddedData": {
			reason: "a data dir without an embedded server must not get a new empty one",
			args:   []string{"--data-dir", t.TempDir(), "--s3-listen", "127.0.0.1:0", "--iam-listen", "127.0.0.1:0"},
			want:   "no embedded server data",
		},
		"BadOutput": {
			reason: "an unknown output format is refused before anything starts",
			args:   []string{"--output", "yaml"},
			want:   "--output",
		},
		"S3IAMWithoutKeys": {
			reason: "the s3iam driver needs the root keys from the environment",
			args:   []string{"--driver", "s3iam"},
			want:   "BUCKETBROKER_S3_ROOT_ACCESS_KEY",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("BUCKETBROKER_S3_ROOT_ACCESS_KEY", "")
			t.Setenv("BUCKETBROKER_S3_ROOT_SECRET_KEY", "")
			_, _, drift, err := runAuditCmd(t, "", append([]string{"admin", "audit"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s\nerr = %v, want one containing %q", tc.reason, err, tc.want)
			}
			if drift {
				t.Errorf("%s\na refusal exited with the drift status", tc.reason)
			}
		})
	}
}

func TestConfirm(t *testing.T) {
	for answer, want := range map[string]bool{
		"y\n": true, "Y\n": true, "yes\n": true, " yes \n": true,
		"\n": false, "n\n": false, "no\n": false, "yess\n": false, "": false, "y": true,
	} {
		var prompt bytes.Buffer
		got, err := confirm(strings.NewReader(answer), &prompt, "Delete? [y/N] ")
		if err != nil || got != want {
			t.Errorf("confirm(%q) = %v, %v; want %v", answer, got, err, want)
		}
		if prompt.String() != "Delete? [y/N] " {
			t.Errorf("confirm wrote prompt %q", prompt.String())
		}
	}
}
