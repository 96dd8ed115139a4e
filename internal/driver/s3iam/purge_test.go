package s3iam

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"golang.org/x/sync/errgroup"

	"github.com/bucketbroker/bucketbroker/internal/sdkhttp"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// rootS3 is an S3 client of the package's server with its root keys: an
// application, or the operator, writing beside the driver.
func rootS3() *s3.Client {
	return s3.New(s3.Options{HTTPClient: sdkhttp.Client(nil),
		Region:       server.Region(),
		BaseEndpoint: aws.String(server.S3Endpoint()),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(rootAccess, rootSecret, ""),
	})
}

func putObjects(t *testing.T, bucket string, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, err := rootS3().PutObject(context.Background(), &s3.PutObjectInput{Bucket: &bucket, Key: &k, Body: strings.NewReader("x")}); err != nil {
			t.Fatalf("PutObject %s: %v", k, err)
		}
	}
}

// beforeDeleteBucket is an HTTP transport that runs hook once, just before
// the first DeleteBucket request reaches the server.
type beforeDeleteBucket struct {
	once sync.Once
	hook func()
}

func (b *beforeDeleteBucket) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodDelete && req.URL.RawQuery == "" && strings.Count(strings.Trim(req.URL.Path, "/"), "/") == 0 {
		b.once.Do(b.hook)
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestDeleteBucketSaysWhatItHolds: a bucket DeleteBucket cannot delete is
// described by what it holds, so that the operation's description tells
// an operator what to look at: the objects an application wrote during the
// purge, the objects of a bucket deleted without purge, or, when nothing
// is listed, that the server keeps something its listings do not show
// (the empty directories a kill inside the embedded server's DeleteObject
// leaves; its next start removes them).
func TestDeleteBucketSaysWhatItHolds(t *testing.T) {
	ctx := context.Background()
	newBucket := func(t *testing.T, d *Driver) string {
		t.Helper()
		name := driver.BucketName("bbtest", "held", randomHex(8))
		if err := d.EnsureBucket(ctx, driver.BucketSpec{Name: name, Owner: "o"}); err != nil {
			t.Fatalf("EnsureBucket: %v", err)
		}
		return name
	}

	t.Run("written during the purge", func(t *testing.T) {
		var name string
		cfg := serverConfig()
		cfg.HTTPClient = &http.Client{Transport: &beforeDeleteBucket{hook: func() { putObjects(t, name, "late/one", "late/two") }}}
		d := newDriver(t, cfg)
		name = newBucket(t, d)
		putObjects(t, name, "early/a/b")
		err := d.DeleteBucket(ctx, name, "o", true)
		if err == nil || !strings.Contains(err.Error(), `objects "late/one", "late/two"`) || !strings.Contains(err.Error(), "written during the purge") {
			t.Errorf("DeleteBucket with objects written during its purge = %v, want them named", err)
		}
		if err := d.DeleteBucket(ctx, name, "o", true); err != nil {
			t.Errorf("a retried purge: %v", err)
		}
	})

	t.Run("without purge", func(t *testing.T) {
		d := newDriver(t, serverConfig())
		name := newBucket(t, d)
		putObjects(t, name, "k1", "k2", "k3", "k4")
		err := d.DeleteBucket(ctx, name, "o", false)
		if !errors.Is(err, driver.ErrBucketNotEmpty) || !strings.Contains(err.Error(), `objects "k1", "k2", "k3" and more`) {
			t.Errorf("DeleteBucket without purge of a bucket with 4 objects = %v, want ErrBucketNotEmpty naming 3 and more", err)
		}
		if err := d.DeleteBucket(ctx, name, "o", true); err != nil {
			t.Errorf("DeleteBucket with purge: %v", err)
		}
	})

	t.Run("nothing listed", func(t *testing.T) {
		d := newDriver(t, serverConfig())
		name := newBucket(t, d)
		putObjects(t, name, "a/b/c")
		// What a kill inside DeleteObject leaves behind in the bucket's
		// folder while the server keeps running.
		left := filepath.Join(dataDir, "objects", name, "x", "y")
		if err := os.MkdirAll(left, 0o700); err != nil {
			t.Fatal(err)
		}
		err := d.DeleteBucket(ctx, name, "o", true)
		if err == nil || !strings.Contains(err.Error(), "it lists no object, version or upload") {
			t.Errorf("DeleteBucket of a bucket that holds only empty directories = %v, want it said that nothing is listed", err)
		}
		if err := os.RemoveAll(filepath.Join(dataDir, "objects", name, "x")); err != nil {
			t.Fatal(err)
		}
		if err := d.DeleteBucket(ctx, name, "o", true); err != nil {
			t.Errorf("DeleteBucket once the directories are gone: %v", err)
		}
	})
}

// TestPurgeReportsProgress: a purge reports the objects it deleted so far
// after each batch, so that a long one shows progress; the last report is
// the whole count.
func TestPurgeReportsProgress(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t, serverConfig())
	name := driver.BucketName("bbtest", "progress", randomHex(8))
	if err := d.EnsureBucket(ctx, driver.BucketSpec{Name: name, Owner: "o"}); err != nil {
		t.Fatalf("EnsureBucket: %v", err)
	}
	const objects = deleteBatch + 200
	var puts errgroup.Group
	puts.SetLimit(8)
	c := rootS3()
	for i := range objects {
		puts.Go(func() error {
			_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &name, Key: aws.String(fmt.Sprintf("o/%05d", i)), Body: strings.NewReader("x")})
			return err
		})
	}
	if err := puts.Wait(); err != nil {
		t.Fatalf("PutObject: %v", err)
	}
	var (
		mu      sync.Mutex
		reports []int64
	)
	pctx := driver.WithPurgeProgress(ctx, func(deleted int64) {
		mu.Lock()
		defer mu.Unlock()
		reports = append(reports, deleted)
	})
	if err := d.DeleteBucket(pctx, name, "o", true); err != nil {
		t.Fatalf("DeleteBucket with purge: %v", err)
	}
	if len(reports) < 2 || reports[len(reports)-1] != objects {
		t.Fatalf("reports %v, want one per batch of at most %d, ending at %d", reports, deleteBatch, objects)
	}
	for i := 1; i < len(reports); i++ {
		if reports[i] <= reports[i-1] {
			t.Fatalf("reports %v do not grow", reports)
		}
	}
}
