package s3gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/bucketbroker/bucketbroker/internal/sdkhttp"
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

// kill stops srv leaving the data directory as a kill -9 would: without
// the IAM index and the clean-stop marker a clean stop writes. Unlike a
// kill, the stop removes the IAM API's socket, which changes run/: the
// next start does not use the in-flight file and repairs every bucket
// (the tests of inflight_test.go kill a process of their own).
func kill(t *testing.T, srv *Server) {
	t.Helper()
	srv.crash = true
	stop(t, srv)
}

func s3Client(srv *Server, access, secret string) *s3.Client {
	return s3ClientAt(srv.S3Endpoint(), srv.Region(), access, secret)
}

func s3ClientAt(endpoint, region, access, secret string) *s3.Client {
	return s3.New(s3.Options{HTTPClient: sdkhttp.Client(nil),
		Region:       region,
		BaseEndpoint: aws.String(endpoint),
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

	rootIAM := iam.New(iam.Options{HTTPClient: sdkhttp.Client(nil),
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
				defer func() {
					if err := c.shutdown(); err != nil {
						t.Errorf("shutdown: %v", err)
					}
				}()
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
	iamc := iam.New(iam.Options{HTTPClient: sdkhttp.Client(nil),
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
	realBucket, half, full := "real-"+randomKey(t), "half-"+randomKey(t), "full-"+randomKey(t)

	first := start(t, cfg)
	if _, err := s3Client(first, cfg.RootAccessKey, cfg.RootSecretKey).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &realBucket}); err != nil {
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
	for _, b := range []string{realBucket, half} {
		if _, err := root.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &b}); err != nil {
			t.Errorf("HeadBucket %s: %v", b, err)
		}
	}
	if _, err := os.Stat(filepath.Join(objects, full, "obj")); err != nil {
		t.Errorf("a directory without an ACL that holds a file was touched: %v", err)
	}
}

// TestStartRemovesEmptyDirsOfKilledDeletes: versitygw deletes an object's
// file and then the parent directories it leaves empty; a kill -9 in
// between left directories that no listing shows, that a purge therefore
// never deletes, and that made DeleteBucket answer BucketNotEmpty for
// ever, in a plain bucket and in the versions folder of a versioned one.
// The next start removes them; objects, directory objects ("dir/") and
// their data stay.
func TestStartRemovesEmptyDirsOfKilledDeletes(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	ctx := context.Background()
	plain, versioned := "plain-"+randomKey(t), "versioned-"+randomKey(t)
	objects, versions := filepath.Join(dir, "objects"), filepath.Join(dir, "versions")

	first := start(t, cfg)
	root := s3Client(first, cfg.RootAccessKey, cfg.RootSecretKey)
	for _, b := range []string{plain, versioned} {
		if _, err := root.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &b}); err != nil {
			t.Fatalf("CreateBucket: %v", err)
		}
	}
	if _, err := root.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: &versioned,
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}}); err != nil {
		t.Fatalf("PutBucketVersioning: %v", err)
	}
	put := func(bucket, key, body string) {
		t.Helper()
		if _, err := root.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: strings.NewReader(body)}); err != nil {
			t.Fatalf("PutObject %s/%s: %v", bucket, key, err)
		}
	}
	for _, key := range []string{"a/b/c.txt", "a/keep.txt", "dir/", "x/y/z.txt"} {
		put(plain, key, "")
	}
	put(versioned, "v/w.txt", "one")
	put(versioned, "v/w.txt", "two") // the first goes to the versions folder
	kill(t, first)                   // a clean stop would say nothing is half done

	// What a kill inside DeleteObject leaves: the file is gone, the
	// directories its key passed through are not.
	remove := func(path string) {
		t.Helper()
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
	remove(filepath.Join(objects, plain, "x", "y", "z.txt"))
	if err := os.MkdirAll(filepath.Join(objects, plain, "e", "f", "g"), 0o700); err != nil {
		t.Fatal(err)
	}
	remove(filepath.Join(objects, versioned, "v", "w.txt"))
	var versionFiles int
	err := filepath.WalkDir(filepath.Join(versions, versioned), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.Contains(path, tmpDir) {
			versionFiles++
			return os.Remove(path)
		}
		return err
	})
	if err != nil || versionFiles == 0 {
		t.Fatalf("remove the versions of %s: %d files, %v", versioned, versionFiles, err)
	}

	second := start(t, cfg)
	root = s3Client(second, cfg.RootAccessKey, cfg.RootSecretKey)
	out, err := root.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &plain})
	if err != nil {
		t.Fatalf("ListObjectsV2: %v", err)
	}
	var listed []string
	for _, o := range out.Contents {
		listed = append(listed, aws.ToString(o.Key))
	}
	if want := []string{"a/b/c.txt", "a/keep.txt", "dir/"}; !slices.Equal(listed, want) {
		t.Errorf("objects after the repair = %q, want %q", listed, want)
	}
	for _, key := range listed {
		if _, err := root.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &plain, Key: &key}); err != nil {
			t.Errorf("DeleteObject %s: %v", key, err)
		}
	}
	vs, err := root.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: &versioned})
	if err != nil {
		t.Fatalf("ListObjectVersions: %v", err)
	}
	if n := len(vs.Versions) + len(vs.DeleteMarkers); n != 0 {
		t.Errorf("%s lists %d versions after its files were removed, want 0", versioned, n)
	}
	for _, b := range []string{plain, versioned} {
		if _, err := root.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &b}); err != nil {
			t.Errorf("DeleteBucket %s with nothing listed in it: %v", b, err)
		}
	}
}

// TestStartWritesOnlyUnderDataDir pins what a container with a read-only
// root filesystem needs: the private socket lives in DataDir/run, not in
// TMPDIR (a socket made in a temporary directory fails on a read-only root
// filesystem, as the Deployment runs it). The data directory's path is longer than a unix
// socket path may be, and a socket file left by a killed process is in the
// way: neither may stop the start, and the gateway must still reach the IAM
// API through the socket (an unknown key is reported by the IAM API).
func TestStartWritesOnlyUnderDataDir(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(filepath.Join(dir, "run"), 0o700); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "run", "iam.sock")
	if len(stale) <= 108 {
		t.Fatalf("socket path %q is short enough for sockaddr_un: the test needs a longer one", stale)
	}
	// A socket file as a SIGKILLed process leaves it: bound, then closed
	// without unlinking (made through the short /proc path, as the server
	// would).
	d, err := os.Open(filepath.Join(dir, "run"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: fmt.Sprintf("/proc/self/fd/%d/iam.sock", d.Fd()), Net: "unix"})
	if err != nil {
		t.Fatalf("make stale socket: %v", err)
	}
	ln.SetUnlinkOnClose(false)
	_ = ln.Close()
	_ = d.Close()
	if _, err := os.Lstat(stale); err != nil {
		t.Fatalf("stale socket not made: %v", err)
	}

	cfg := testConfig(t, dir)
	srv := start(t, cfg)
	if fi, err := os.Lstat(stale); err != nil || fi.Mode().Type() != fs.ModeSocket {
		t.Errorf("private socket at %s: %v (mode %v), want a socket", stale, err, fi)
	}
	if fi, err := os.Stat(filepath.Join(dir, "run")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("socket directory: %v (mode %v), want 0700", err, fi)
	}
	_, err = s3Client(srv, "AKIAUNKNOWN"+randomKey(t), cfg.RootSecretKey).ListBuckets(context.Background(), &s3.ListBucketsInput{})
	if got := apiCode(err); got != "InvalidAccessKeyId" {
		t.Errorf("ListBuckets with an unknown key: %v (code %q), want InvalidAccessKeyId from the IAM API", err, got)
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("the server wrote %s in TMPDIR; everything belongs under DataDir", e.Name())
	}
}

// TestStartRestoresVersionsOfKilledDeletes: deleting the current version
// of an object in a versioned bucket makes versitygw remove the object's
// file and then move the newest older version into its place; a kill -9
// in between left the older versions in the versions folder with no
// object, where no listing shows them, no deletion reaches them and
// DeleteBucket counts them for ever. The server records the key when a
// version is deleted (here through DeleteObject and DeleteObjects), and
// the next start moves the newest version into the object's place, as
// the deletion would have: it is listed, readable and deletable again.
// An object with versions that was not being deleted stays as it was.
func TestStartRestoresVersionsOfKilledDeletes(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	ctx := context.Background()
	bucket := "versioned-" + randomKey(t)
	objects := filepath.Join(dir, "objects")

	first := start(t, cfg)
	root := s3Client(first, cfg.RootAccessKey, cfg.RootSecretKey)
	if _, err := root.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatalf("CreateBucket: %v", err)
	}
	if _, err := root.PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: &bucket,
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}}); err != nil {
		t.Fatalf("PutBucketVersioning: %v", err)
	}
	// versionsOf lists the versions of every key, the newest first, as
	// "body@id".
	versionsOf := func(root *s3.Client) map[string][]string {
		t.Helper()
		out, err := root.ListObjectVersions(ctx, &s3.ListObjectVersionsInput{Bucket: &bucket})
		if err != nil {
			t.Fatalf("ListObjectVersions: %v", err)
		}
		got := map[string][]string{}
		for _, v := range out.Versions {
			key, id := aws.ToString(v.Key), aws.ToString(v.VersionId)
			obj, err := root.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key, VersionId: &id})
			if err != nil {
				t.Fatalf("GetObject %s version %s: %v", key, id, err)
			}
			body, err := io.ReadAll(obj.Body)
			_ = obj.Body.Close()
			if err != nil {
				t.Fatalf("read %s version %s: %v", key, id, err)
			}
			got[key] = append(got[key], string(body)+"@"+id)
		}
		for _, m := range out.DeleteMarkers {
			got[aws.ToString(m.Key)] = append(got[aws.ToString(m.Key)], "marker@"+aws.ToString(m.VersionId))
		}
		return got
	}
	keys := []string{"d/e/k", "flat", "other"}
	for _, key := range keys {
		for _, body := range []string{"one", "two", "three"} {
			if _, err := root.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: strings.NewReader(body)}); err != nil {
				t.Fatalf("PutObject %s: %v", key, err)
			}
		}
	}
	before := versionsOf(root)
	id := func(key string, i int) *string {
		return aws.String(before[key][i][strings.Index(before[key][i], "@")+1:])
	}
	// An older version deleted through each API: the key is recorded.
	if _, err := root.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: aws.String("d/e/k"), VersionId: id("d/e/k", 2)}); err != nil {
		t.Fatalf("DeleteObject: %v", err)
	}
	if _, err := root.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &bucket, Delete: &types.Delete{
		Objects: []types.ObjectIdentifier{{Key: aws.String("flat"), VersionId: id("flat", 2)}}}}); err != nil {
		t.Fatalf("DeleteObjects: %v", err)
	}
	kill(t, first)

	// What a kill inside the deletion of the current version leaves: the
	// object's file is gone, its older version not yet moved into place.
	for _, key := range []string{"d/e/k", "flat"} {
		if err := os.Remove(filepath.Join(objects, bucket, key)); err != nil {
			t.Fatal(err)
		}
	}

	second := start(t, cfg)
	root = s3Client(second, cfg.RootAccessKey, cfg.RootSecretKey)
	got := versionsOf(root)
	want := map[string][]string{
		"d/e/k": before["d/e/k"][1:2],
		"flat":  before["flat"][1:2],
		"other": before["other"],
	}
	for _, key := range keys {
		if !slices.Equal(got[key], want[key]) {
			t.Errorf("versions of %s after the restart = %q, want %q (before the kill: %q)", key, got[key], want[key], before[key])
		}
	}
	for key, versions := range got {
		for _, v := range versions {
			vid := v[strings.Index(v, "@")+1:]
			if _, err := root.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: &key, VersionId: &vid}); err != nil {
				t.Errorf("DeleteObject %s version %s: %v", key, vid, err)
			}
		}
	}
	if _, err := root.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &bucket}); err != nil {
		t.Errorf("DeleteBucket after deleting every listed version: %v", err)
	}
}

// TestStartListsNoBuckets: the S3 server's start-up probe asks for one
// bucket by name; a ListBuckets, even of one bucket, reads and lstats
// every bucket's directory in versitygw's posix backend (0.3 s of CPU at
// 100,000 buckets). A ListBuckets after is counted, so the count is live.
func TestStartListsNoBuckets(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	before := bucketListings.Load()
	srv := start(t, cfg)
	if n := bucketListings.Load() - before; n != 0 {
		t.Errorf("the start listed the buckets %d times, want none", n)
	}
	if _, err := s3Client(srv, cfg.RootAccessKey, cfg.RootSecretKey).ListBuckets(context.Background(), &s3.ListBucketsInput{}); err != nil {
		t.Fatal(err)
	}
	if n := bucketListings.Load() - before; n != 1 {
		t.Errorf("after one ListBuckets the count is %d, want 1", n)
	}
}
