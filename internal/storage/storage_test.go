package storage

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func stop(t *testing.T, b *Storage) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestEmbeddedKeepsRootKeys starts the embedded server twice on one data
// dir: the first start generates the root keys into a 0600 file, the
// second reads the same ones back, and the backend answers both times.
func TestEmbeddedKeepsRootKeys(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data") // created by Start
	cfg := Config{DataDir: dir, S3Listen: "127.0.0.1:0", IAMListen: "127.0.0.1:0"}
	first, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !first.GeneratedRootCredentials || first.RootCredentialsFile != filepath.Join(dir, "s3-root-credentials.json") {
		t.Errorf("generated %v in %q, want true in the data dir", first.GeneratedRootCredentials, first.RootCredentialsFile)
	}
	if fi, err := os.Stat(first.RootCredentialsFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("root keys file: %v, %v; want mode 0600", fi, err)
	}
	if err := first.Ready(ctx); err != nil {
		t.Errorf("Ready: %v", err)
	}
	if first.PublicS3Endpoint != first.S3Endpoint || first.Region != "us-east-1" || !first.PathStyle {
		t.Errorf("public endpoint %q region %q path style %v, want %q us-east-1 true", first.PublicS3Endpoint, first.Region, first.PathStyle, first.S3Endpoint)
	}
	stop(t, first)

	cfg.PublicS3Endpoint = "https://s3.example.com"
	second, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer stop(t, second)
	if second.RootAccessKey != first.RootAccessKey || second.RootSecretKey != first.RootSecretKey {
		t.Error("a restart on the same data dir changed the root keys")
	}
	if second.PublicS3Endpoint != "https://s3.example.com" {
		t.Errorf("public endpoint %q, want the configured one", second.PublicS3Endpoint)
	}
}

// TestStartRefuses: an unknown driver and an unreachable endpoint fail at
// start with one clear error, and leave nothing running.
func TestStartRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg  Config
		want string
	}{
		"unknown driver":             {Config{Driver: "ceph-magic"}, `unknown driver "ceph-magic"`},
		"minio without its endpoint": {Config{Driver: DriverMinIO, RootAccessKey: "a", RootSecretKey: "b"}, "--driver minio needs --s3-endpoint"},
		"unreachable minio": {Config{Driver: DriverMinIO, S3Endpoint: "http://127.0.0.1:1", RootAccessKey: "a", RootSecretKey: "bbbbbbbb"},
			"storage backend check failed"},
		"unreachable": {Config{Driver: DriverS3IAM, S3Endpoint: "http://127.0.0.1:1", IAMEndpoint: "http://127.0.0.1:1",
			RootAccessKey: "a", RootSecretKey: "b", PathStyle: true}, "storage backend check failed"},
	} {
		t.Run(name, func(t *testing.T) {
			tc.cfg.DataDir = t.TempDir()
			b, err := Start(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) || b != nil {
				t.Errorf("Start = %v, %v; want an error mentioning %q", b, err, tc.want)
			}
		})
	}
}

// TestStartMinIO: --driver minio reaches a MinIO server (hack/minio.sh;
// make test-minio) at --s3-endpoint with its root keys, and refuses wrong
// keys at start.
func TestStartMinIO(t *testing.T) {
	endpoint := os.Getenv("BUCKETBROKER_TEST_MINIO_ENDPOINT")
	if endpoint == "" {
		t.Skip(`no MinIO server: run eval "$(hack/minio.sh start /tmp/DIR)" to set BUCKETBROKER_TEST_MINIO_ENDPOINT (make test-minio does it all)`)
	}
	cfg := Config{Driver: DriverMinIO, DataDir: t.TempDir(), S3Endpoint: endpoint,
		RootAccessKey: os.Getenv("BUCKETBROKER_TEST_MINIO_ACCESS_KEY"), RootSecretKey: os.Getenv("BUCKETBROKER_TEST_MINIO_SECRET_KEY")}
	b, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if b.PublicS3Endpoint != endpoint || !b.PathStyle || b.Region != "us-east-1" {
		t.Errorf("endpoint %q, path style %v, region %q; want %s, path style, us-east-1", b.PublicS3Endpoint, b.PathStyle, b.Region, endpoint)
	}
	if err := b.Ready(context.Background()); err != nil {
		t.Errorf("Ready: %v", err)
	}
	cfg.RootSecretKey = "not-the-secret"
	if _, err := Start(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "storage backend check failed") {
		t.Errorf("Start with a wrong secret = %v, want the backend check's failure", err)
	}
}
