package s3iam

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// callLog is an http.RoundTripper that records each request as the S3
// operation's method and query keys or the IAM Action.
type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (c *callLog) RoundTrip(req *http.Request) (*http.Response, error) {
	call := req.Method + " " + strings.Join(slices.Sorted(func(yield func(string) bool) {
		for k := range req.URL.Query() {
			if !strings.HasPrefix(k, "x-") && !yield(k) {
				return
			}
		}
	}), "&")
	if req.Method == http.MethodPost && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		if form, err := url.ParseQuery(string(body)); err == nil && form.Get("Action") != "" {
			call = "IAM " + form.Get("Action")
		}
	}
	c.mu.Lock()
	c.calls = append(c.calls, call)
	c.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

func (c *callLog) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = nil
	slices.Sort(out)
	return out
}

// TestReadinessCheckConstant: the check (Observe with an empty request)
// makes one S3 and one IAM request, neither a listing of buckets or users,
// whatever the backend holds: a bucket listing of a made-up bucket and a
// GetUser of a made-up user. A listing of users or buckets would cost
// time in proportion to them on versitygw.
func TestReadinessCheckConstant(t *testing.T) {
	ctx := context.Background()
	log := &callLog{}
	cfg := serverConfig()
	cfg.HTTPClient = &http.Client{Transport: log}
	d := newDriver(t, cfg)
	want := []string{"GET list-type&max-keys", "IAM GetUser"}
	for round := range 2 {
		if _, err := d.Observe(ctx, driver.ObserveRequest{}); err != nil {
			t.Fatalf("round %d: readiness check: %v", round, err)
		}
		if got := log.take(); !slices.Equal(got, want) {
			t.Errorf("round %d: readiness check made %q, want %q", round, got, want)
		}
		// More users and buckets for the second round: the same calls.
		for i := range 3 {
			owner := driver.OwnerMark("test", fmt.Sprintf("ready-%d-%s", i, randomHex(4)))
			bucket := "ready-" + randomHex(6)
			if err := d.EnsureBucket(ctx, driver.BucketSpec{Name: bucket, Owner: owner}); err != nil {
				t.Fatal(err)
			}
			if _, err := d.EnsureCredential(ctx, driver.CredentialSpec{UserName: "ready-" + randomHex(6), Owner: owner, Bucket: bucket, Access: driver.AccessReadWrite}); err != nil {
				t.Fatal(err)
			}
		}
		log.take()
	}
}

var readinessUsers = flag.Int("readiness-users", 1000, "BenchmarkReadiness: users (each with a bucket) added between the two measures")

// BenchmarkReadiness measures the readiness check on the embedded server
// before and after -readiness-users users (each with its bucket) are made:
// the two times per check should be alike. The old check (a ListUsers and a
// ListBuckets of one) read every user's file on this server.
func BenchmarkReadiness(b *testing.B) {
	ctx := context.Background()
	cfg := serverConfig()
	d, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	measure := func(name string) {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := d.Observe(ctx, driver.ObserveRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	measure("users=before")
	for i := range *readinessUsers {
		owner := driver.OwnerMark("bench", fmt.Sprintf("readiness-%d-%s", i, randomHex(4)))
		bucket := "readiness-" + randomHex(6)
		if err := d.EnsureBucket(ctx, driver.BucketSpec{Name: bucket, Owner: owner}); err != nil {
			b.Fatal(err)
		}
		if _, err := d.EnsureCredential(ctx, driver.CredentialSpec{UserName: "readiness-" + randomHex(6), Owner: owner, Bucket: bucket, Access: driver.AccessReadWrite}); err != nil {
			b.Fatal(err)
		}
	}
	measure(fmt.Sprintf("users=after+%d", *readinessUsers))
}
