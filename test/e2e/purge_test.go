package e2e

import (
	"context"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bucketbroker/bucketbroker/internal/sdkhttp"
)

// TestDeprovisionAfterKillMidPurge: kill -9 while the embedded server
// deletes objects whose keys hold "/" (a purge, or an application
// deleting its own) leaves empty directories in the bucket's folder that
// no listing shows; the deprovision stayed in progress ("objects were
// written during the purge") until the async timeout, and failed, and so
// did every retry. The state is made as the kill leaves it: the broker is
// killed, and the files of some objects are gone while the directories of
// their keys stay. After the restart the deprovision converges and the
// bucket is gone.
func TestDeprovisionAfterKillMidPurge(t *testing.T) {
	b := newBroker(t)
	b.Start()
	inst := "/v2/service_instances/purged"
	body := maps.Clone(provisionBody)
	body["parameters"] = map[string]any{"purge_on_delete": true}
	untilDone(t, b, "PUT", inst, body, http.StatusCreated)
	c := untilDone(t, b, "PUT", inst+"/service_bindings/app", bindBody, http.StatusCreated).Creds()
	bucket, _ := c["bucket"].(string)
	ak, _ := c["access_key_id"].(string)
	sk, _ := c["secret_access_key"].(string)
	app := s3.New(s3.Options{HTTPClient: sdkhttp.Client(nil), Region: "us-east-1", BaseEndpoint: aws.String(b.Backend.S3), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(ak, sk, "")})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, key := range []string{"a/b/c.txt", "a/keep", "logs/2026/12/01/x.log", "dir/", "top"} {
		data := "x"
		if strings.HasSuffix(key, "/") {
			data = "" // a directory object holds no data
		}
		if _, err := app.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: strings.NewReader(data)}); err != nil {
			t.Fatalf("PutObject %s: %v", key, err)
		}
	}

	b.Kill()
	folder := filepath.Join(b.DataDir, "s3", "objects", bucket)
	for _, gone := range []string{"a/b/c.txt", "logs/2026/12/01/x.log"} {
		if err := os.Remove(filepath.Join(folder, gone)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(folder, "tmp", "x", "y"), 0o700); err != nil {
		t.Fatal(err)
	}
	// A kill inside the DeleteObject would also leave the bucket named in
	// the embedded server's in-flight file, which the next start repairs
	// (internal/s3gateway's TestKillWithCreateBucketInFlight). Made by
	// hand, the damage is in no slot: without the file, the start repairs
	// every bucket.
	if err := os.Remove(filepath.Join(b.DataDir, "s3", "in-flight")); err != nil {
		t.Fatal(err)
	}

	b.Start()
	untilDone(t, b, "DELETE", inst+"/service_bindings/app"+deleteQuery, nil, http.StatusOK)
	r := untilDone(t, b, "DELETE", inst+deleteQuery+"&accepts_incomplete=true", nil, http.StatusAccepted, http.StatusOK)
	if r.Code == http.StatusAccepted {
		if r, err := b.LastOperation(time.Minute, inst, r.Operation()); err != nil || r.State() != "succeeded" {
			t.Fatalf("deprovision after the kill: %v %v", r, err)
		}
	}
	if got := buckets(t, b); len(got) != 0 {
		t.Errorf("buckets after the deprovision: %q, want none", got)
	}
	if _, err := os.Stat(folder); !os.IsNotExist(err) {
		t.Errorf("the bucket's folder after the deprovision: %v, want it gone", err)
	}
}
