package s3gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// The tests in this package run one after another: versitygw allows one
// gateway per process, and each test starts and stops its own.

func randomKey(t *testing.T) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func testConfig(t *testing.T, dir string) Config {
	return Config{
		DataDir:       dir,
		S3Listen:      "127.0.0.1:0",
		IAMListen:     "127.0.0.1:0",
		RootAccessKey: "root" + randomKey(t),
		RootSecretKey: randomKey(t) + randomKey(t),
		Region:        "us-east-1",
	}
}

func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { stop(t, srv) })
	return srv
}

func stop(t *testing.T, srv *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

func s3Client(srv *Server, access, secret string) *s3.Client {
	return s3.New(s3.Options{
		Region:       srv.Region(),
		BaseEndpoint: aws.String(srv.S3Endpoint()),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(access, secret, ""),
		Retryer:      aws.NopRetryer{},
	})
}

func apiCode(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}

func TestStartServesS3AndIAM(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	srv := start(t, cfg)
	ctx := context.Background()

	if !strings.HasPrefix(srv.S3Endpoint(), "http://127.0.0.1:") || strings.HasSuffix(srv.S3Endpoint(), ":0") {
		t.Errorf("S3Endpoint() = %q, want http://127.0.0.1:<port>", srv.S3Endpoint())
	}
	if srv.S3Endpoint() == srv.IAMEndpoint() {
		t.Errorf("S3 and IAM share endpoint %q", srv.S3Endpoint())
	}

	root := s3Client(srv, cfg.RootAccessKey, cfg.RootSecretKey)
	if _, err := root.ListBuckets(ctx, &s3.ListBucketsInput{}); err != nil {
		t.Fatalf("ListBuckets with root keys: %v", err)
	}

	rootIAM := iam.New(iam.Options{
		Region:       IAMRegion,
		BaseEndpoint: aws.String(srv.IAMEndpoint()),
		Credentials:  credentials.NewStaticCredentialsProvider(cfg.RootAccessKey, cfg.RootSecretKey, ""),
		Retryer:      aws.NopRetryer{},
	})
	if _, err := rootIAM.ListUsers(ctx, &iam.ListUsersInput{}); err != nil {
		t.Fatalf("IAM ListUsers with root keys: %v", err)
	}

	tests := map[string]struct {
		reason         string
		access, secret string
		wantCode       string
	}{
		"BadSignature": {
			reason:   "a request signed with the wrong secret must be rejected",
			access:   cfg.RootAccessKey,
			secret:   cfg.RootSecretKey + "x",
			wantCode: "SignatureDoesNotMatch",
		},
		"UnknownKey": {
			reason:   "a request with an access key nobody issued must be rejected",
			access:   "AKIAUNKNOWN" + randomKey(t),
			secret:   cfg.RootSecretKey,
			wantCode: "InvalidAccessKeyId",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := s3Client(srv, tc.access, tc.secret).ListBuckets(ctx, &s3.ListBucketsInput{})
			if got := apiCode(err); got != tc.wantCode {
				t.Errorf("%s\nListBuckets: got error %v (code %q), want code %q", tc.reason, err, got, tc.wantCode)
			}
		})
	}
}

func TestObjectsPersistAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	ctx := context.Background()
	bucket, key, body := "persist-"+randomKey(t), "a/b.txt", "kept across restarts"

	first := start(t, cfg)
	root := s3Client(first, cfg.RootAccessKey, cfg.RootSecretKey)
	if _, err := root.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatalf("CreateBucket: %v", err)
	}
	if _, err := root.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: strings.NewReader(body)}); err != nil {
		t.Fatalf("PutObject: %v", err)
	}
	stop(t, first)
	if err := first.Wait(); err != nil {
		t.Errorf("Wait after Stop: %v", err)
	}
	if _, err := root.ListBuckets(ctx, &s3.ListBucketsInput{}); err == nil {
		t.Errorf("ListBuckets after Stop succeeded, want a connection error")
	}

	// Same process, same data directory: versitygw must allow a second run
	// once the first has returned.
	second := start(t, cfg)
	root = s3Client(second, cfg.RootAccessKey, cfg.RootSecretKey)
	out, err := root.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		t.Fatalf("GetObject after restart: %v", err)
	}
	defer out.Body.Close()
	got, err := io.ReadAll(out.Body)
	if err != nil {
		t.Fatalf("read object: %v", err)
	}
	if string(got) != body {
		t.Errorf("object after restart = %q, want %q", got, body)
	}
}

func TestStartErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyAddr := busy.Addr().String()

	t.Run("S3PortInUse", func(t *testing.T) {
		cfg := testConfig(t, t.TempDir())
		cfg.S3Listen = busyAddr
		srv, err := Start(context.Background(), cfg)
		if err == nil {
			stop(t, srv)
			t.Fatalf("Start on a busy S3 port succeeded")
		}
		want := "start embedded S3 server on " + busyAddr + ": address already in use"
		if err.Error() != want {
			t.Errorf("Start error = %q, want %q", err, want)
		}
	})
	t.Run("IAMPortInUse", func(t *testing.T) {
		cfg := testConfig(t, t.TempDir())
		cfg.IAMListen = busyAddr
		srv, err := Start(context.Background(), cfg)
		if err == nil {
			stop(t, srv)
			t.Fatalf("Start on a busy IAM port succeeded")
		}
		want := "start embedded IAM API on " + busyAddr + ": address already in use"
		if err.Error() != want {
			t.Errorf("Start error = %q, want %q", err, want)
		}
	})
	t.Run("SecondServer", func(t *testing.T) {
		start(t, testConfig(t, t.TempDir()))
		srv, err := Start(context.Background(), testConfig(t, t.TempDir()))
		if err == nil {
			stop(t, srv)
			t.Fatalf("a second Start while one runs succeeded")
		}
		if !strings.Contains(err.Error(), "already running") {
			t.Errorf("Start error = %q, want it to say one is already running", err)
		}
	})
}

// TestStartListenerReportsServerErrors covers the path the port checks
// cannot: a server goroutine that fails after Start handed it the address
// (another process bound the port in between).
func TestStartListenerReportsServerErrors(t *testing.T) {
	bindErr := fmt.Errorf("failed to bind s3 listener: listen tcp: %w", &os.SyscallError{Syscall: "bind", Err: syscall.EADDRINUSE})
	tests := map[string]struct {
		reason   string
		listen   string
		failures int // runs that fail with bindErr before one succeeds
		wantErr  string
		wantRuns int
	}{
		"FixedPortTaken": {
			reason:   "a fixed port taken after the check is reported, not retried",
			listen:   "127.0.0.1:%d",
			failures: 1,
			wantErr:  "start embedded S3 server on 127.0.0.1:%d: address already in use",
			wantRuns: 1,
		},
		"AutoPortTakenOnce": {
			reason:   "a picked port taken in between is replaced by another",
			listen:   "127.0.0.1:0",
			failures: 1,
			wantRuns: 2,
		},
		"AutoPortAlwaysTaken": {
			reason:   "retries are bounded",
			listen:   "127.0.0.1:0",
			failures: portAttempts,
			wantErr:  "start embedded S3 server on 127.0.0.1:",
			wantRuns: portAttempts,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			port := 0
			if strings.Contains(tc.listen, "%d") {
				addr, err := reserve("127.0.0.1", "0")
				if err != nil {
					t.Fatal(err)
				}
				_, p, _ := net.SplitHostPort(addr)
				port, _ = strconv.Atoi(p)
				tc.listen = fmt.Sprintf(tc.listen, port)
				tc.wantErr = fmt.Sprintf(tc.wantErr, port)
			}
			runs := 0
			_, c, err := startListener(context.Background(), "S3 server", tc.listen, func(string) (*component, func(context.Context) error) {
				runs++
				fail := runs <= tc.failures
				return launch(func(ctx context.Context) error {
						if fail {
							return bindErr
						}
						<-ctx.Done()
						return nil
					}), func(context.Context) error {
						if fail {
							return errors.New("not listening")
						}
						return nil
					}
			})
			if c != nil {
				defer c.shutdown()
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("%s\nstartListener: %v", tc.reason, err)
			case tc.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) || !strings.HasSuffix(err.Error(), ": address already in use")):
				t.Errorf("%s\nstartListener error = %v, want %q...: address already in use", tc.reason, err, tc.wantErr)
			}
			if runs != tc.wantRuns {
				t.Errorf("%s\nserver started %d times, want %d", tc.reason, runs, tc.wantRuns)
			}
		})
	}
}

// TestStopAfterManyConnections: a client that had many requests in flight
// at once, on both APIs, leaves its connections open; Stop still returns
// at once. With keep-alive on, the servers waited for some of those
// connections until their 10 s shutdown timeout, and Stop failed.
func TestStopAfterManyConnections(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	ctx := context.Background()
	srv, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	s3c := s3Client(srv, cfg.RootAccessKey, cfg.RootSecretKey)
	iamc := iam.New(iam.Options{
		Region: IAMRegion, BaseEndpoint: aws.String(srv.IAMEndpoint()), Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider(cfg.RootAccessKey, cfg.RootSecretKey, ""),
	})
	const n = 64
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := iamc.ListUsers(ctx, &iam.ListUsersInput{})
			if err == nil {
				_, err = s3c.ListBuckets(ctx, &s3.ListBucketsInput{})
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("request: %v", err)
		}
	}
	// Well below the servers' own 10 s shutdown timeout.
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := srv.Stop(sctx); err != nil {
		t.Errorf("Stop after %d concurrent requests: %v", n, err)
		_ = srv.Wait() // let it finish before the next test starts one
	}
}

// TestStartRemovesHalfCreatedBuckets: a kill -9 inside versitygw's
// CreateBucket, after its mkdir and before its ACL (found by test/crash
// TestKillUnderLoad), left a directory that failed every request for that
// name with a 500 for ever. The next start removes it when it is empty, so
// a retried CreateBucket succeeds; real buckets, and a directory without
// an ACL that holds something, stay.
func TestStartRemovesHalfCreatedBuckets(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	ctx := context.Background()
	real, half, full := "real-"+randomKey(t), "half-"+randomKey(t), "full-"+randomKey(t)

	first := start(t, cfg)
	if _, err := s3Client(first, cfg.RootAccessKey, cfg.RootSecretKey).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &real}); err != nil {
		t.Fatalf("CreateBucket: %v", err)
	}
	stop(t, first)
	objects := filepath.Join(dir, "objects")
	if err := os.Mkdir(filepath.Join(objects, half), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(objects, full), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(objects, full, "obj"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	second := start(t, cfg)
	root := s3Client(second, cfg.RootAccessKey, cfg.RootSecretKey)
	if _, err := root.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &half}); err != nil {
		t.Errorf("CreateBucket of the half-created name after a restart: %v", err)
	}
	for _, b := range []string{real, half} {
		if _, err := root.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &b}); err != nil {
			t.Errorf("HeadBucket %s: %v", b, err)
		}
	}
	if _, err := os.Stat(filepath.Join(objects, full, "obj")); err != nil {
		t.Errorf("a directory without an ACL that holds a file was touched: %v", err)
	}
}
