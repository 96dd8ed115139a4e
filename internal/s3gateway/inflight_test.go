package s3gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/versity/versitygw/backend/meta"
	"golang.org/x/sys/unix"
)

// The kill tests run a server in a process of their own (this test
// binary, TestInFlightChild) and kill it with SIGKILL, as a kill -9 does:
// a Stop in this process would shut the servers down (the IAM socket is
// removed, the calls in flight return), which a kill does not.

// childEnv hands the child its childSpec, as JSON.
const childEnv = "BUCKETBROKER_S3GATEWAY_TEST_CHILD"

type childSpec struct {
	DataDir, Access, Secret string
	// Hold names a bucket whose CreateBucket stops inside versitygw,
	// after its mkdir and before it stores the ACL, until the kill.
	Hold string
}

// holdACL is versitygw's attribute store, but storing the ACL of the
// bucket named hold never returns: the child says "holding" and waits to
// be killed.
type holdACL struct {
	meta.XattrMeta
	hold string
}

func (h holdACL) StoreAttribute(f *os.File, bucket, object, attr string, value []byte) error {
	if bucket == h.hold && object == "" && attr == "acl" {
		fmt.Println("holding")
		select {}
	}
	return h.XattrMeta.StoreAttribute(f, bucket, object, attr, value)
}

// TestInFlightChild is the child of the kill tests: a server that runs
// until it is killed. It is skipped in a plain test run.
func TestInFlightChild(t *testing.T) {
	v := os.Getenv(childEnv)
	if v == "" {
		t.Skip("the server the kill tests start in a process of its own")
	}
	var spec childSpec
	if err := json.Unmarshal([]byte(v), &spec); err != nil {
		t.Fatal(err)
	}
	if spec.Hold != "" {
		objectMeta = holdACL{hold: spec.Hold}
	}
	srv, err := Start(context.Background(), Config{
		DataDir: spec.DataDir, RootAccessKey: spec.Access, RootSecretKey: spec.Secret,
		S3Listen: "127.0.0.1:0", IAMListen: "127.0.0.1:0",
	})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready", srv.S3Endpoint())
	select {}
}

// child is a server in a process of its own.
type child struct {
	*testChild
	s3 *s3.Client
}

// startChild starts a server on cfg's data directory in a process of its
// own; hold is childSpec.Hold.
func startChild(t *testing.T, cfg Config, hold string) *child {
	t.Helper()
	spec, err := json.Marshal(childSpec{DataDir: cfg.DataDir, Access: cfg.RootAccessKey, Secret: cfg.RootSecretKey, Hold: hold})
	if err != nil {
		t.Fatal(err)
	}
	c := &child{testChild: startTestChild(t, "TestInFlightChild", childEnv+"="+string(spec))}
	endpoint := c.waitFor(t, "ready ")
	c.s3 = s3ClientAt(endpoint, cfg.Region, cfg.RootAccessKey, cfg.RootSecretKey)
	return c
}

// loggedConfig is a test configuration whose log goes to logged.
func loggedConfig(t *testing.T) (Config, *strings.Builder) {
	cfg := testConfig(t, t.TempDir())
	logged := &strings.Builder{}
	cfg.Logger = slog.New(slog.NewTextHandler(logged, nil))
	return cfg, logged
}

// repairsSince are the repairs of every bucket and the buckets repaired
// by name since before.
func repairsSince(before [2]int64) (all, named int64) {
	return repairRuns.Load() - before[0], bucketRepairs.Load() - before[1]
}

func repairsNow() [2]int64 { return [2]int64{repairRuns.Load(), bucketRepairs.Load()} }

func hasACL(dir string) bool {
	_, err := unix.Getxattr(dir, bucketACLXattr, nil)
	return err == nil
}

// TestKillWithCreateBucketInFlight: a server killed inside versitygw's
// CreateBucket, after its mkdir and before the bucket's ACL, leaves a
// directory that fails every request for its name. The next start
// repairs the bucket its in-flight file names, and no other: it does not
// walk the buckets (empty directories made by hand in another bucket,
// where no call was in flight, stay), and a retried CreateBucket
// succeeds.
func TestKillWithCreateBucketInFlight(t *testing.T) {
	ctx := context.Background()
	cfg, logged := loggedConfig(t)
	kept, half := "kept-"+randomKey(t), "half-"+randomKey(t)
	objects := filepath.Join(cfg.DataDir, "objects")

	c := startChild(t, cfg, half)
	if _, err := c.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &kept}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &kept, Key: aws.String("a/b/c"), Body: strings.NewReader("x")}); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = c.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &half}) }()
	c.waitFor(t, "holding")
	c.kill(t)
	if !exists(filepath.Join(objects, half)) || hasACL(filepath.Join(objects, half)) {
		t.Fatalf("the kill did not leave %s without an ACL", half)
	}
	notWalked := filepath.Join(objects, kept, "e", "f")
	if err := os.MkdirAll(notWalked, 0o700); err != nil {
		t.Fatal(err)
	}

	before := repairsNow()
	srv := start(t, cfg)
	if all, named := repairsSince(before); all != 0 || named != 1 {
		t.Errorf("the start after the kill: %d repairs of every bucket, %d buckets repaired by name; want 0, 1", all, named)
	}
	if exists(filepath.Join(objects, half)) {
		t.Errorf("the half-created bucket %s is still there", half)
	}
	if !exists(notWalked) {
		t.Errorf("%s was removed: the start walked a bucket no call was in flight on", notWalked)
	}
	root := s3Client(srv, cfg.RootAccessKey, cfg.RootSecretKey)
	if _, err := root.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &half}); err != nil {
		t.Errorf("CreateBucket of the half-created name: %v", err)
	}
	if _, err := root.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &kept, Key: aws.String("a/b/c")}); err != nil {
		t.Errorf("HeadObject %s/a/b/c: %v", kept, err)
	}
	if strings.Contains(logged.String(), "level=WARN") {
		t.Errorf("want no warning, logged:\n%s", logged.String())
	}
}

// killedIdle leaves cfg's data directory as a server killed with no call
// in flight leaves it, after it made a bucket and put and deleted objects
// in it (their slots written and cleared).
func killedIdle(t *testing.T, cfg Config) (bucket string) {
	t.Helper()
	ctx := context.Background()
	bucket = "idle-" + randomKey(t)
	c := startChild(t, cfg, "")
	if _, err := c.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"a/b/kept", "a/b/gone"} {
		if _, err := c.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: strings.NewReader("x")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: aws.String("a/b/gone")}); err != nil {
		t.Fatal(err)
	}
	c.kill(t)
	return bucket
}

// TestKillWithNothingInFlightRepairsNothing: a server killed with no call
// in flight leaves an in-flight file whose slots are all clear, and the
// next start repairs nothing (no walk of the buckets), with no warning.
func TestKillWithNothingInFlightRepairsNothing(t *testing.T) {
	cfg, logged := loggedConfig(t)
	bucket := killedIdle(t, cfg)

	before := repairsNow()
	srv := start(t, cfg)
	if all, named := repairsSince(before); all != 0 || named != 0 {
		t.Errorf("the start after the kill: %d repairs of every bucket, %d buckets repaired by name; want 0, 0", all, named)
	}
	if strings.Contains(logged.String(), "level=WARN") {
		t.Errorf("want no warning, logged:\n%s", logged.String())
	}
	_, err := s3Client(srv, cfg.RootAccessKey, cfg.RootSecretKey).HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &bucket, Key: aws.String("a/b/kept")})
	if err != nil {
		t.Errorf("HeadObject: %v", err)
	}
}

// TestInFlightFileNotUsed: after a kill, what the in-flight file cannot
// vouch for makes the start repair every bucket, with one warning: another
// server's start (its socket bound in run/), a bucket directory made by
// hand, a boot since (a crash of the machine may have lost slots), and
// a file cut short, emptied, or with a byte changed in any record.
func TestInFlightFileNotUsed(t *testing.T) {
	flip := func(at int64) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			path := filepath.Join(dir, inFlightFile)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			b[at] ^= 1
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	truncate := func(size int64) func(t *testing.T, dir string) {
		return func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, inFlightFile), size); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		name   string
		change func(t *testing.T, dir string)
		half   bool // the change made a half-created bucket, which the walk removes
	}{
		{"another server ran", func(t *testing.T, dir string) {
			// What every server start does: the killed server's socket
			// removed, its own bound (and removed when it stops).
			sock := filepath.Join(dir, "run", socketName)
			if err := os.Remove(sock); err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			_ = ln.Close()
		}, false},
		{"bucket directory made by hand", func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, "objects", "half"), 0o700); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"machine restarted", func(t *testing.T, dir string) {
			other := filepath.Join(t.TempDir(), "boot_id")
			if err := os.WriteFile(other, []byte("00000000-1111-2222-3333-444444444444\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			old := bootIDFile
			bootIDFile = other
			t.Cleanup(func() { bootIDFile = old })
		}, false},
		{"cut short", truncate(inFlightRecord * (firstSlot + 10)), false},
		{"emptied", truncate(0), false},
		{"byte changed in the header", flip(recordOffset(headerRecord) + 20), false},
		{"byte changed in the stamp of objects", flip(recordOffset(objectsRecord) + 6), false},
		{"byte changed in a slot", flip(recordOffset(firstSlot+7) + 1), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, logged := loggedConfig(t)
			killedIdle(t, cfg)
			tc.change(t, cfg.DataDir)

			before := repairsNow()
			start(t, cfg)
			if all, named := repairsSince(before); all != 1 || named != 0 {
				t.Errorf("%d repairs of every bucket, %d buckets repaired by name; want 1, 0", all, named)
			}
			if n := strings.Count(logged.String(), "level=WARN"); n != 1 || !strings.Contains(logged.String(), "in-flight file is not used") {
				t.Errorf("want one warning that the in-flight file is not used, logged:\n%s", logged.String())
			}
			if tc.half && exists(filepath.Join(cfg.DataDir, "objects", "half")) {
				t.Errorf("the directory made by hand without an ACL is still there")
			}
		})
	}
}

// TestInFlightSlots: each call that can leave damage holds a slot while
// it runs (here, concurrent ones on two buckets), and clears it when it
// returns, in a server that runs on.
func TestInFlightSlots(t *testing.T) {
	dir := t.TempDir()
	for _, d := range cleanStopDirs(dir) {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	f, err := openInFlight(dir, DefaultS3MaxConnections+ownMaxConnections)
	if err != nil {
		t.Fatal(err)
	}
	defer f.close()
	named := func() []string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, inFlightFile))
		if err != nil {
			t.Fatal(err)
		}
		buckets, err := inFlightBuckets(dir, b)
		if err != nil {
			t.Fatal(err)
		}
		return buckets
	}
	ctx := context.Background()
	var ends []func()
	for _, b := range []string{"one", "two", "one"} {
		end, err := f.begin(ctx, opObjects, b)
		if err != nil {
			t.Fatal(err)
		}
		ends = append(ends, end)
	}
	if got := named(); strings.Join(got, ",") != "one,two" {
		t.Errorf("with three calls in flight the file names %q, want one, two", got)
	}
	ends[0]()
	ends[1]()
	if got := named(); strings.Join(got, ",") != "one" {
		t.Errorf("with one call in flight the file names %q, want one", got)
	}
	ends[2]()
	if got := named(); len(got) != 0 {
		t.Errorf("with no call in flight the file names %q, want none", got)
	}
	// A bucket made while the server runs: its stamp of objects/ is
	// recorded when the call returns.
	end, err := f.begin(ctx, opBucket, "made")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "objects", "made"), 0o700); err != nil {
		t.Fatal(err)
	}
	end()
	if got := named(); len(got) != 0 {
		t.Errorf("after a CreateBucket returned the file names %q, want none", got)
	}
}

// BenchmarkInFlightCall is what the in-flight file adds to each call
// that can leave damage: a slot written and cleared (two pwrites of a
// record), on every core at once.
//
//	go test -run '^$' -bench InFlightCall ./internal/s3gateway/
func BenchmarkInFlightCall(b *testing.B) {
	dir := b.TempDir()
	for _, d := range cleanStopDirs(dir) {
		if err := os.MkdirAll(d, 0o700); err != nil {
			b.Fatal(err)
		}
	}
	f, err := openInFlight(dir, DefaultS3MaxConnections+ownMaxConnections)
	if err != nil {
		b.Fatal(err)
	}
	defer f.close()
	ctx := context.Background()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			end, err := f.begin(ctx, opObjects, "bb-scale-0000001-1a646d20291d41473a9fed13")
			if err != nil {
				b.Error(err)
				return
			}
			end()
		}
	})
}
