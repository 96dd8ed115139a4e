package s3iam

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/s3gateway"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
	"github.com/bucketbroker/bucketbroker/pkg/driver/drivertest"
)

// One embedded server for the whole package: versitygw runs one per
// process.
var (
	server     *s3gateway.Server
	dataDir    string // the server's
	rootAccess string
	rootSecret string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "s3iam-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	dataDir = dir
	rootAccess, rootSecret = "root"+randomHex(8), randomHex(20)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	server, err = s3gateway.Start(ctx, s3gateway.Config{
		DataDir:       dir,
		S3Listen:      "127.0.0.1:0",
		IAMListen:     "127.0.0.1:0",
		RootAccessKey: rootAccess,
		RootSecretKey: rootSecret,
		Region:        "us-east-1",
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if err := server.Stop(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return code
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func newDriver(t *testing.T, cfg Config) *Driver {
	t.Helper()
	d, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return d
}

func serverConfig() Config {
	return Config{
		S3Endpoint:      server.S3Endpoint(),
		IAMEndpoint:     server.IAMEndpoint(),
		Region:          server.Region(),
		PathStyle:       true,
		AccessKeyID:     rootAccess,
		SecretAccessKey: rootSecret,
	}
}

func TestConformance(t *testing.T) {
	cfg := serverConfig()
	drivertest.Run(t, suiteConfig(newDriver(t, cfg), cfg, "bbtest"))
}

// suiteConfig is the conformance suite's configuration for driver d on the
// server cfg names, with cfg's (root) keys, naming what it makes under
// prefix.
func suiteConfig(d *Driver, cfg Config, prefix string) drivertest.Config {
	return drivertest.Config{
		Driver:              d,
		S3Endpoint:          cfg.S3Endpoint,
		IAMEndpoint:         cfg.IAMEndpoint,
		Region:              cfg.Region,
		PathStyle:           cfg.PathStyle,
		RootAccessKeyID:     cfg.AccessKeyID,
		RootSecretAccessKey: cfg.SecretAccessKey,
		Prefix:              prefix,
	}
}

// closedPort is a 127.0.0.1 address nobody listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return "http://" + addr
}

func TestObserveHealthErrors(t *testing.T) {
	testHealthErrors(t, serverConfig())
}

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func TestEnsureBucketReservedTag(t *testing.T) {
	d := newDriver(t, serverConfig())
	name := driver.BucketName("bbtest", "reserved", randomHex(8))
	err := d.EnsureBucket(context.Background(), driver.BucketSpec{
		Name: name, Owner: "o", Tags: map[string]string{"bucketbroker.io/owner": "someone"},
	})
	if !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("EnsureBucket with a reserved tag: got %v, want ErrInvalid", err)
	}
	obs, err := d.Observe(context.Background(), driver.ObserveRequest{Bucket: name})
	if err != nil || obs.BucketExists {
		t.Errorf("after a refused EnsureBucket: Observe = %+v, %v; want no bucket", obs, err)
	}
}

func TestNewRequiresIAMEndpointWithS3Endpoint(t *testing.T) {
	_, err := New(Config{S3Endpoint: "http://127.0.0.1:1"})
	if !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("New(S3Endpoint without IAMEndpoint): got %v, want ErrInvalid", err)
	}
}

func TestPolicyDocument(t *testing.T) {
	_, err := policyDocument("aws", "b", "admin")
	if !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("policyDocument(admin): got %v, want ErrInvalid", err)
	}
	doc, err := policyDocument("aws-cn", "b", driver.AccessReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"Resource":["arn:aws-cn:s3:::b/*"]`; !strings.Contains(doc, want) {
		t.Errorf("policy %s does not contain %s", doc, want)
	}
}

// TestCallTimeout checks that a backend that accepts connections and never
// answers cannot hang a call made with a context without deadline.
func TestCallTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	silent := "http://" + ln.Addr().String()
	cfg := serverConfig()
	cfg.S3Endpoint = silent
	cfg.CallTimeout = 300 * time.Millisecond
	d := newDriver(t, cfg)

	start := time.Now()
	_, err = d.Observe(context.Background(), driver.ObserveRequest{})
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Errorf("Observe took %v with a 300ms call timeout", elapsed)
	}
	want := "S3 endpoint " + silent + ": no answer before the deadline"
	if err == nil || err.Error() != want {
		t.Errorf("Observe error = %v, want %q", err, want)
	}
}
