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
	"github.com/versity/versitygw/iamapi/types"
)

func iamClient(srv *Server, cfg Config) *iam.Client {
	return iam.New(iam.Options{
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

// counts is what the start skips: the walks of the users folder, the
// repairs, the user files read.
type counts struct{ walks, repairs, reads int64 }

func countsNow() counts {
	return counts{userWalks.Load(), repairRuns.Load(), recordReads.Load()}
}

func (c counts) since(before counts) counts {
	return counts{c.walks - before.walks, c.repairs - before.repairs, c.reads - before.reads}
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

// TestCleanStopSkipsWalkAndRepair: a start after a clean stop takes the
// IAM index and the clean-stop marker (they are gone before it serves,
// so a kill from then on leaves neither), reads no user's file but the
// one named by hand (the index keeps no id for it), does not repair, and
// has every user, key and bucket.
func TestCleanStopSkipsWalkAndRepair(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t, t.TempDir())
	usersFolder := filepath.Join(cfg.DataDir, "iam", usersDir)
	if err := os.MkdirAll(usersFolder, 0o700); err != nil {
		t.Fatal(err)
	}
	hand := types.User{UserName: "by-hand", UserID: "AIDAHAND", Path: "/",
		AccessKeys: []types.AccessKeyEntry{{AccessKeyId: "AKIAHAND", SecretAccessKey: "s", Status: "Active"}}}
	b, err := encodeUser(hand)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(usersFolder, "uhand.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	bucket := "kept-" + randomKey(t)

	first := start(t, cfg)
	keys := makeUsers(t, first, cfg, "app", 5)
	keys[hand.UserName] = "AKIAHAND"
	if _, err := s3Client(first, cfg.RootAccessKey, cfg.RootSecretKey).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	stop(t, first)
	index, marker := filepath.Join(cfg.DataDir, "iam", indexFile), filepath.Join(cfg.DataDir, cleanStopFile)
	if !exists(index) || !exists(marker) {
		t.Fatalf("after a clean stop: index there %v, marker there %v; want both", exists(index), exists(marker))
	}

	before := countsNow()
	second := start(t, cfg)
	if got := countsNow().since(before); got != (counts{0, 0, 1}) {
		t.Errorf("a start after a clean stop: %d walks, %d repairs, %d files read; want 0, 0, 1 (the file named by hand)", got.walks, got.repairs, got.reads)
	}
	if exists(index) || exists(marker) {
		t.Errorf("while serving: index there %v, marker there %v; want neither (a kill now must leave none)", exists(index), exists(marker))
	}
	checkUsers(t, second, cfg, keys)
	if _, err := s3Client(second, cfg.RootAccessKey, cfg.RootSecretKey).HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &bucket}); err != nil {
		t.Errorf("HeadBucket: %v", err)
	}
}

// TestKillRunsWalkAndRepair: a server killed (no clean stop) after a
// start that used the index leaves neither file, so the next start reads
// every user's file, sees the users made since, and removes a bucket a
// killed CreateBucket left half made.
func TestKillRunsWalkAndRepair(t *testing.T) {
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
	if got := countsNow().since(before); got.walks != 1 || got.repairs != 1 || got.reads != 4 {
		t.Errorf("a start after a kill: %d walks, %d repairs, %d files read; want 1, 1, 4", got.walks, got.repairs, got.reads)
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
// writes the files, or a hand) makes the start do the full work: a user
// file added, rewritten (as every version of the store writes: a rename
// over it) or removed makes it read every user's file, and another
// server's start (its socket bound in run/) or a bucket directory made
// makes it repair.
func TestStaleCleanStopNotUsed(t *testing.T) {
	cases := []struct {
		name           string
		change         func(t *testing.T, dir string, srv *Server, keys map[string]string)
		walks, repairs int64
	}{
		{"user added", func(t *testing.T, dir string, _ *Server, keys map[string]string) {
			u := types.User{UserName: "added", UserID: "AIDAADDED", Path: "/",
				AccessKeys: []types.AccessKeyEntry{{AccessKeyId: "AKIAADDED", SecretAccessKey: "s", Status: "Active"}}}
			b, err := encodeUser(u)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "iam", usersDir, userFileName(u.UserID)), b, 0o600); err != nil {
				t.Fatal(err)
			}
			keys["added"] = "AKIAADDED"
		}, 1, 0},
		{"user changed", func(t *testing.T, _ string, srv *Server, keys map[string]string) {
			f := srv.store.users["app-0"].sh.store.(*userFile)
			u, err := f.lookup("app-0")
			if err != nil {
				t.Fatal(err)
			}
			u.AccessKeys[0].AccessKeyId = "AKIACHANGED"
			if err := f.write(u); err != nil {
				t.Fatal(err)
			}
			keys["app-0"] = "AKIACHANGED"
		}, 1, 0},
		{"user removed", func(t *testing.T, _ string, srv *Server, keys map[string]string) {
			if err := os.Remove(srv.store.users["app-1"].sh.store.(*userFile).path()); err != nil {
				t.Fatal(err)
			}
			delete(keys, "app-1")
		}, 1, 0},
		{"another server ran", func(t *testing.T, dir string, _ *Server, _ map[string]string) {
			sock := filepath.Join(dir, "run", socketName)
			if err := os.WriteFile(sock, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(sock); err != nil {
				t.Fatal(err)
			}
		}, 0, 1},
		{"bucket directory made", func(t *testing.T, dir string, _ *Server, _ map[string]string) {
			if err := os.Mkdir(filepath.Join(dir, "objects", "half"), 0o700); err != nil {
				t.Fatal(err)
			}
		}, 0, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, logged, first, keys := stoppedWithUsers(t)
			tc.change(t, cfg.DataDir, first, keys)

			before := countsNow()
			srv := start(t, cfg)
			if got := countsNow().since(before); got.walks != tc.walks || got.repairs != tc.repairs {
				t.Errorf("%d walks, %d repairs; want %d, %d", got.walks, got.repairs, tc.walks, tc.repairs)
			}
			if n := strings.Count(logged.String(), "level=WARN"); n != 1 || !strings.Contains(logged.String(), "changed since") {
				t.Errorf("want one warning that says what changed, logged:\n%s", logged.String())
			}
			checkUsers(t, srv, cfg, keys)
		})
	}
}

// TestCorruptCleanStopFallsBack: an index or a marker cut short, with a
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
		for _, file := range []string{filepath.Join("iam", indexFile), cleanStopFile} {
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
				want := counts{walks: 0, repairs: 1}
				if file != cleanStopFile {
					want = counts{walks: 1, repairs: 0}
				}
				if got := countsNow().since(before); got.walks != want.walks || got.repairs != want.repairs {
					t.Errorf("%d walks, %d repairs; want %d, %d", got.walks, got.repairs, want.walks, want.repairs)
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
// process, as under a kill: the stop leaves the IAM index but not the
// clean-stop marker, so the next start repairs.
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
	index, marker := filepath.Join(cfg.DataDir, "iam", indexFile), filepath.Join(cfg.DataDir, cleanStopFile)
	if !exists(index) || exists(marker) {
		t.Fatalf("a stop with a request running: index there %v, marker there %v; want the index and no marker", exists(index), exists(marker))
	}
	before := countsNow()
	start(t, cfg)
	if got := countsNow().since(before); got.walks != 0 || got.repairs != 1 {
		t.Errorf("the start after it: %d walks, %d repairs; want 0 (the index) and 1", got.walks, got.repairs)
	}
}
