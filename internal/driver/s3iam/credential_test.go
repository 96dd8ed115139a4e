package s3iam

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// iamAction returns the Action of an IAM (query protocol) request, leaving
// its body readable.
func iamAction(r *http.Request) string {
	if r.Body == nil || r.Method != http.MethodPost {
		return ""
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return ""
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	q, err := url.ParseQuery(string(b))
	if err != nil {
		return ""
	}
	return q.Get("Action")
}

// TestNewUserFailedPolicyDropsKey covers the new user whose policy fails
// while its key is created (the two run together, see newUserCredential):
// the call fails without the key, and the retry deletes that key, which
// nobody holds, and makes a new one.
func TestNewUserFailedPolicyDropsKey(t *testing.T) {
	ctx := context.Background()
	var failed atomic.Bool
	keyCreated := make(chan struct{})
	var created sync.Once
	cfg := serverConfig()
	cfg.HTTPClient = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		action := iamAction(r)
		if action == "PutUserPolicy" && failed.CompareAndSwap(false, true) {
			// Fail once the key exists, so that there is a key to drop.
			select {
			case <-keyCreated:
			case <-time.After(10 * time.Second):
			}
			body := `<ErrorResponse><Error><Type>Sender</Type><Code>MalformedPolicyDocument</Code>` +
				`<Message>injected by the test</Message></Error><RequestId>test</RequestId></ErrorResponse>`
			return &http.Response{
				StatusCode: http.StatusBadRequest, Status: "400 Bad Request", // not retried
				Header: http.Header{"Content-Type": {"text/xml"}}, Body: io.NopCloser(strings.NewReader(body)),
				ContentLength: int64(len(body)), Request: r, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			}, nil
		}
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err == nil && action == "CreateAccessKey" && resp.StatusCode == http.StatusOK {
			created.Do(func() { close(keyCreated) })
		}
		return resp, err
	})}
	faulty := newDriver(t, cfg)
	d := newDriver(t, serverConfig())

	spec := driver.CredentialSpec{
		UserName: "bbtest-dropped-" + randomHex(4), Owner: driver.OwnerMark("binding", randomHex(4)),
		Bucket: "bbtest-dropped", Access: driver.AccessReadWrite,
	}
	t.Cleanup(func() { _ = d.RevokeCredential(ctx, spec.UserName, spec.Owner) })
	if cred, err := faulty.EnsureCredential(ctx, spec); err == nil {
		t.Fatalf("EnsureCredential with a failing PutUserPolicy = key %q, want an error", cred.AccessKeyID)
	}
	keys, err := d.listKeys(ctx, spec.UserName)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 {
		t.Fatalf("after the failed call the user has %d keys, want the 1 whose answer was dropped", len(keys))
	}
	dropped := aws.ToString(keys[0].AccessKeyId)

	cred, err := d.EnsureCredential(ctx, spec)
	if err != nil {
		t.Fatalf("EnsureCredential again: %v", err)
	}
	if cred.AccessKeyID == "" || cred.SecretAccessKey == "" || cred.AccessKeyID == dropped {
		t.Fatalf("EnsureCredential again = key %q (secret set %v), want a new key with its secret (dropped %q)",
			cred.AccessKeyID, cred.SecretAccessKey != "", dropped)
	}
	if keys, err = d.listKeys(ctx, spec.UserName); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || aws.ToString(keys[0].AccessKeyId) != cred.AccessKeyID {
		t.Errorf("after the retry the user has keys %v, want only %q", keys, cred.AccessKeyID)
	}
}
