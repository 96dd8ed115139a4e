package engine_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"golang.org/x/sync/errgroup"
)

// TestPurgeShowsProgress plays a platform polling the deprovision of an
// instance whose bucket holds more objects than one delete batch (1,000),
// on a backend that takes 300 ms a call: while the purge runs, the
// operation's description says how many objects are gone so far.
func TestPurgeShowsProgress(t *testing.T) {
	h := newHarness(t, harnessOpts{backendLatency: 300 * time.Millisecond})
	inst := instancePth + newID()
	h.want(h.do("PUT", inst, provisionBody(planStd, map[string]any{"purge_on_delete": true})), http.StatusCreated, "provision")
	bucket := h.want(h.do("PUT", inst+"/service_bindings/"+newID(), bindBody(planStd, nil)), http.StatusCreated, "bind").creds()["bucket"].(string)

	ctx := context.Background()
	app := s3Client(rootAK, rootSK, nil) // the application's writes are not slowed
	var puts errgroup.Group
	puts.SetLimit(8)
	for i := range 1200 {
		puts.Go(func() error {
			_, err := app.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String(fmt.Sprintf("o/%05d", i)), Body: strings.NewReader("x")})
			return err
		})
	}
	if err := puts.Wait(); err != nil {
		t.Fatalf("PutObject: %v", err)
	}

	op := h.want(h.do("DELETE", del(inst, planStd, true), nil), http.StatusAccepted, "deprovision").str("operation")
	var seen []string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		r := h.want(h.do("GET", inst+"/last_operation?operation="+op, nil), http.StatusOK, "poll")
		if d := r.str("description"); len(seen) == 0 || seen[len(seen)-1] != d {
			seen = append(seen, d)
		}
		if r.str("state") != "in progress" {
			if r.str("state") != "succeeded" {
				t.Fatalf("deprovision ended %q: %v", r.str("state"), seen)
			}
			break
		}
	}
	if n := h.metric("bucketbroker_backend_calls_total"); n < 3 {
		t.Errorf("%v backend calls counted, want one at least for each of the provision, the bind and the deprovision", n)
	}
	want := fmt.Sprintf("deleting the objects of bucket %s, 1000 deleted so far", bucket)
	for _, d := range seen {
		if strings.Contains(d, want) {
			return
		}
	}
	t.Fatalf("descriptions seen while polling %q, want one with %q", seen, want)
}
