package s3iam

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// recorder is an HTTP transport that notes each request to the server and
// can answer some itself, standing in for a server that lacks a feature.
type recorder struct {
	mu       sync.Mutex
	requests []string // "PUT versioning", "GET tagging", ...
	answer   func(*http.Request) *http.Response
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.requests = append(r.requests, req.Method+" "+req.URL.RawQuery)
	r.mu.Unlock()
	if r.answer != nil {
		if resp := r.answer(req); resp != nil {
			return resp, nil
		}
	}
	return http.DefaultTransport.RoundTrip(req)
}

func (r *recorder) writes() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var w []string
	for _, q := range r.requests {
		if !strings.HasPrefix(q, "GET ") && !strings.HasPrefix(q, "HEAD ") {
			w = append(w, q)
		}
	}
	return w
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = nil
}

func TestEnsureBucketVersioningWritesOnce(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	cfg := serverConfig()
	cfg.HTTPClient = &http.Client{Transport: rec}
	d := newDriver(t, cfg)
	name := driver.BucketName("bbtest", "versioning", randomHex(8))
	spec := driver.BucketSpec{Name: name, Owner: "o", Versioning: true}
	if err := d.EnsureBucket(ctx, spec); err != nil {
		t.Fatalf("EnsureBucket(Versioning): %v", err)
	}
	t.Cleanup(func() { _ = d.DeleteBucket(context.Background(), name, "o", true) })
	if w := rec.writes(); !containsQuery(w, "versioning") {
		t.Errorf("first EnsureBucket wrote %q, want a PUT ?versioning among them", w)
	}
	rec.reset()
	if err := d.EnsureBucket(ctx, spec); err != nil {
		t.Fatalf("second EnsureBucket(Versioning): %v", err)
	}
	// (A driver that tries CreateBucket first sends that PUT each time; it
	// changes nothing on a bucket we own.)
	if w := rec.writes(); containsQuery(w, "versioning") {
		t.Errorf("second EnsureBucket wrote %q, want no PUT ?versioning: versioning is on already", w)
	}
}

func TestEnsureBucketVersioningUnsupported(t *testing.T) {
	ctx := context.Background()
	// versitygw's answer when started without a versioning directory.
	rec := &recorder{answer: func(req *http.Request) *http.Response {
		if req.Method != http.MethodPut || !strings.Contains(req.URL.RawQuery, "versioning") {
			return nil
		}
		body := `<?xml version="1.0" encoding="UTF-8"?><Error><Code>VersioningNotConfigured</Code>` +
			`<Message>Versioning has not been configured for the gateway.</Message></Error>`
		return &http.Response{StatusCode: http.StatusNotImplemented, Status: "501 Not Implemented",
			Header: http.Header{"Content-Type": {"application/xml"}}, Body: io.NopCloser(strings.NewReader(body)), Request: req}
	}}
	cfg := serverConfig()
	cfg.HTTPClient = &http.Client{Transport: rec}
	d := newDriver(t, cfg)
	name := driver.BucketName("bbtest", "noversioning", randomHex(8))
	err := d.EnsureBucket(ctx, driver.BucketSpec{Name: name, Owner: "o", Versioning: true})
	t.Cleanup(func() { _ = d.DeleteBucket(context.Background(), name, "o", true) })
	if !errors.Is(err, driver.ErrInvalid) || !driver.Permanent(err) {
		t.Errorf("EnsureBucket(Versioning) on a server without it: got %v, want a permanent ErrInvalid", err)
	}
	if err == nil || !strings.Contains(err.Error(), "does not support versioning") {
		t.Errorf("error %v does not say the server lacks versioning", err)
	}
	// The tagging, made beside the refused versioning, was not cut short:
	// the bucket the caller now deletes as refused carries its mark.
	if b, err := d.observeBucket(ctx, name); err != nil || b.owner() != "o" {
		t.Errorf("after the refusal the bucket's owner mark is %q (%v), want %q", b.owner(), err, "o")
	}
}

func containsQuery(requests []string, query string) bool {
	for _, r := range requests {
		if strings.Contains(r, query) {
			return true
		}
	}
	return false
}
