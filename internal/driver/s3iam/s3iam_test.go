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
	drivertest.Run(t, drivertest.Config{
		Driver:              newDriver(t, serverConfig()),
		S3Endpoint:          server.S3Endpoint(),
		IAMEndpoint:         server.IAMEndpoint(),
		Region:              server.Region(),
		PathStyle:           true,
		RootAccessKeyID:     rootAccess,
		RootSecretAccessKey: rootSecret,
		Prefix:              "bbtest",
	})
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
	dead := closedPort(t)
	tests := map[string]struct {
		reason string
		modify func(*Config)
		// want lists the messages of the EndpointErrors, in order.
		want []string
	}{
		"WrongSecret": {
			reason: "a wrong secret must be named as rejected credentials on both endpoints",
			modify: func(c *Config) { c.SecretAccessKey = "wrong" + rootSecret },
			want: []string{
				"S3 endpoint " + server.S3Endpoint() + ": credentials rejected (SignatureDoesNotMatch)",
				"IAM endpoint " + server.IAMEndpoint() + ": credentials rejected (SignatureDoesNotMatch)",
			},
		},
		"UnknownKey": {
			reason: "an unknown key must be named as rejected credentials on both endpoints",
			modify: func(c *Config) { c.AccessKeyID = "AKIANOBODY" + randomHex(4) },
			want: []string{
				"S3 endpoint " + server.S3Endpoint() + ": credentials rejected (InvalidAccessKeyId)",
				"IAM endpoint " + server.IAMEndpoint() + ": credentials rejected (InvalidClientTokenId)",
			},
		},
		"S3Unreachable": {
			reason: "a closed S3 port must be named as refused, and IAM still checked",
			modify: func(c *Config) { c.S3Endpoint = dead },
			want:   []string{"S3 endpoint " + dead + ": connection refused"},
		},
		"IAMUnreachable": {
			reason: "a closed IAM port must be named as refused",
			modify: func(c *Config) { c.IAMEndpoint = dead },
			want:   []string{"IAM endpoint " + dead + ": connection refused"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := serverConfig()
			tc.modify(&cfg)
			d := newDriver(t, cfg)
			_, err := d.Observe(context.Background(), driver.ObserveRequest{})
			var got []string
			for _, e := range unjoin(err) {
				var epErr *EndpointError
				if !errors.As(e, &epErr) {
					t.Fatalf("%s\nObserve error %v is not an *EndpointError", tc.reason, e)
				}
				got = append(got, epErr.Error())
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("%s\nObserve errors:\n%s\nwant:\n%s", tc.reason, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if err != nil && strings.Contains(err.Error(), rootSecret) {
				t.Errorf("Observe error contains the secret key")
			}
		})
	}
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
