package s3gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bucketbroker/bucketbroker/internal/sdkhttp"
)

func iamClient(srv *Server, cfg Config) *iam.Client {
	return iam.New(iam.Options{HTTPClient: sdkhttp.Client(nil),
		Region: IAMRegion, BaseEndpoint: aws.String(srv.IAMEndpoint()), Retryer: aws.NopRetryer{},
		Credentials: credentials.NewStaticCredentialsProvider(cfg.RootAccessKey, cfg.RootSecretKey, ""),
	})
}

// makeUsers creates n users with a key each through the IAM API and
// returns their key ids by name.
func makeUsers(t *testing.T, srv *Server, cfg Config, prefix string, n int) map[string]string {
	t.Helper()
	ctx := context.Background()
	c := iamClient(srv, cfg)
	keys := map[string]string{}
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if _, err := c.CreateUser(ctx, &iam.CreateUserInput{UserName: &name, Path: aws.String("/bb/")}); err != nil {
			t.Fatalf("CreateUser %s: %v", name, err)
		}
		out, err := c.CreateAccessKey(ctx, &iam.CreateAccessKeyInput{UserName: &name})
		if err != nil {
			t.Fatalf("CreateAccessKey %s: %v", name, err)
		}
		keys[name] = aws.ToString(out.AccessKey.AccessKeyId)
	}
	return keys
}

// checkUsers says whether the server knows exactly these users (by
// name, in the listing and by their key ids).
func checkUsers(t *testing.T, srv *Server, cfg Config, keys map[string]string) {
	t.Helper()
	ctx := context.Background()
	out, err := iamClient(srv, cfg).ListUsers(ctx, &iam.ListUsersInput{})
	if err != nil {
		t.Fatalf("ListUsers: %v", err)
	}
	var got, want []string
	for _, u := range out.Users {
		got = append(got, aws.ToString(u.UserName))
	}
	for name, key := range keys {
		want = append(want, name)
		if u, err := srv.store.GetUserByAccessKeyID(ctx, key); err != nil || u.UserName != name {
			t.Errorf("the user of key %s: %v, %v; want %s", key, u, err, name)
		}
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("ListUsers = %v, want %v", got, want)
	}
}

// counts is what a start does or skips: the repairs, the IAM users read
// (none: the users database needs no walk).
type counts struct{ repairs, reads int64 }

func countsNow() counts {
	return counts{repairRuns.Load(), userReads.Load()}
}

func (c counts) since(before counts) counts {
	return counts{c.repairs - before.repairs, c.reads - before.reads}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// stoppedWithUsers starts a server logging to logged, makes three users
// (keys by name) and stops it cleanly.
func stoppedWithUsers(t *testing.T) (cfg Config, logged *strings.Builder, first *Server, keys map[string]string) {
	cfg = testConfig(t, t.TempDir())
	logged = &strings.Builder{}
	cfg.Logger = slog.New(slog.NewTextHandler(logged, nil))
	first = start(t, cfg)
	keys = makeUsers(t, first, cfg, "app", 3)
	stop(t, first)
	return cfg, logged, first, keys
}

// TestCleanStopSkipsRepair: a start after a clean stop takes the
// clean-stop marker (gone before it serves, so a kill from then on leaves
// none), does not repair, reads no IAM user (nor after a kill:
// TestKillRunsRepair), and has every user, key and bucket.
func TestCleanStopSkipsRepair(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t, t.TempDir())
	bucket := "kept-" + randomKey(t)
	first := start(t, cfg)
	keys := makeUsers(t, first, cfg, "app", 5)
	if _, err := s3Client(first, cfg.RootAccessKey, cfg.RootSecretKey).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	stop(t, first)
	marker := filepath.Join(cfg.DataDir, cleanStopFile)
	if !exists(marker) {
		t.Fatal("after a clean stop: no marker")
	}

	before := countsNow()
	second := start(t, cfg)
	if got := countsNow().since(before); got != (counts{0, 0}) {
		t.Errorf("a start after a clean stop: %d repairs, %d users read; want 0, 0", got.repairs, got.reads)
	}
	if exists(marker) {
		t.Error("while serving: the marker is there; want none (a kill now must leave none)")
	}
	checkUsers(t, second, cfg, keys)
	if _, err := s3Client(second, cfg.RootAccessKey, cfg.RootSecretKey).HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &bucket}); err != nil {
		t.Errorf("HeadBucket: %v", err)
	}
}

// TestKillRunsRepair: a server killed (no clean stop) after a start that
// used the marker leaves none, so the next start repairs: it removes a
// bucket a killed CreateBucket left half made. It reads no IAM user, and
// has the users made before and since.
func TestKillRunsRepair(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t, t.TempDir())
	first := start(t, cfg)
	keys := makeUsers(t, first, cfg, "before", 2)
	stop(t, first)

	second := start(t, cfg)
	for k, v := range makeUsers(t, second, cfg, "after", 2) {
		keys[k] = v
	}
	kill(t, second)
	half := "half-" + randomKey(t)
	if err := os.Mkdir(filepath.Join(cfg.DataDir, "objects", half), 0o700); err != nil {
		t.Fatal(err)
	}

	before := countsNow()
	third := start(t, cfg)
	if got := countsNow().since(before); got != (counts{1, 0}) {
		t.Errorf("a start after a kill: %d repairs, %d users read; want 1, 0", got.repairs, got.reads)
	}
	checkUsers(t, third, cfg, keys)
	if exists(filepath.Join(cfg.DataDir, "objects", half)) {
		t.Errorf("the half-created bucket %s is still there", half)
	}
	if _, err := s3Client(third, cfg.RootAccessKey, cfg.RootSecretKey).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &half}); err != nil {
		t.Errorf("CreateBucket of the half-created name: %v", err)
	}
}

// TestStaleCleanStopNotUsed: what changes the data directory while the
// server is stopped (an older bucketbroker, which neither takes nor
// writes the marker, or a hand) makes the start repair: another
// server's start (its socket bound in run/) or a bucket directory made.
func TestStaleCleanStopNotUsed(t *testing.T) {
	cases := []struct {
		name    string
		change  func(t *testing.T, dir string, srv *Server, keys map[string]string)
		repairs int64
	}{
		{"another server ran", func(t *testing.T, dir string, _ *Server, _ map[string]string) {
			sock := filepath.Join(dir, "run", socketName)
			if err := os.WriteFile(sock, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(sock); err != nil {
				t.Fatal(err)
			}
		}, 1},
		{"bucket directory made", func(t *testing.T, dir string, _ *Server, _ map[string]string) {
			if err := os.Mkdir(filepath.Join(dir, "objects", "half"), 0o700); err != nil {
				t.Fatal(err)
			}
		}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, logged, first, keys := stoppedWithUsers(t)
			tc.change(t, cfg.DataDir, first, keys)

			before := countsNow()
			srv := start(t, cfg)
			if got := countsNow().since(before); got.repairs != tc.repairs {
				t.Errorf("%d repairs; want %d", got.repairs, tc.repairs)
			}
			if n := strings.Count(logged.String(), "level=WARN"); n != 1 || !strings.Contains(logged.String(), "changed since") {
				t.Errorf("want one warning that says what changed, logged:\n%s", logged.String())
			}
			checkUsers(t, srv, cfg, keys)
		})
	}
}

// TestCorruptCleanStopFallsBack: a marker cut short, with a
// byte changed, emptied, or of another version, is not used: the start
// warns once and does the full work.
func TestCorruptCleanStopFallsBack(t *testing.T) {
	corruptions := map[string]func([]byte) []byte{
		"cut short":    func(b []byte) []byte { return b[:len(b)/2] },
		"byte changed": func(b []byte) []byte { b[len(b)/2] ^= 1; return b },
		"empty":        func([]byte) []byte { return nil },
		"other magic":  func(b []byte) []byte { return append([]byte("x"), b...) },
	}
	for name, corrupt := range corruptions {
		for _, file := range []string{cleanStopFile} {
			t.Run(name+" "+file, func(t *testing.T) {
				cfg, logged, _, keys := stoppedWithUsers(t)
				path := filepath.Join(cfg.DataDir, file)
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, corrupt(b), 0o600); err != nil {
					t.Fatal(err)
				}

				before := countsNow()
				srv := start(t, cfg)
				if got := countsNow().since(before); got.repairs != 1 {
					t.Errorf("%d repairs; want 1", got.repairs)
				}
				if n := strings.Count(logged.String(), "level=WARN"); n != 1 {
					t.Errorf("want one warning, logged:\n%s", logged.String())
				}
				checkUsers(t, srv, cfg, keys)
				if exists(path) {
					t.Errorf("%s is still there", path)
				}
			})
		}
	}
}

// TestStopWithRequestRunningLeavesNoMarker: a stop that finds an S3
// request still running waits out versitygw's shutdown limit, after which
// versitygw returns without an error and the request dies with the
// process, as under a kill: the stop leaves no clean-stop marker, so the
// next start repairs.
func TestStopWithRequestRunningLeavesNoMarker(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out versitygw's 10 s shutdown limit")
	}
	cfg := testConfig(t, t.TempDir())
	srv := start(t, cfg)
	makeUsers(t, srv, cfg, "app", 1)
	// A request whose body never comes whole: the connection stays busy.
	conn, err := net.Dial("tcp", srv.s3Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "PUT /some-bucket/some-key HTTP/1.1\r\nHost: %s\r\nContent-Length: 1000\r\n\r\npart of the body", srv.s3Addr); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // let the server read what was sent
	stop(t, srv)
	if marker := filepath.Join(cfg.DataDir, cleanStopFile); exists(marker) {
		t.Fatalf("a stop with a request running left the clean-stop marker %s", marker)
	}
	before := countsNow()
	start(t, cfg)
	if got := countsNow().since(before); got.repairs != 1 {
		t.Errorf("the start after it: %d repairs; want 1", got.repairs)
	}
}
