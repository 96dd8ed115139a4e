package engine_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// versioningOf is the bucket's versioning status as the server reports it:
// "" for a bucket that never had it.
func (h *harness) versioningOf(bucket string) s3types.BucketVersioningStatus {
	h.t.Helper()
	out, err := h.s3.GetBucketVersioning(context.Background(), &s3.GetBucketVersioningInput{Bucket: aws.String(bucket)})
	if err != nil {
		h.t.Fatalf("root: get versioning of %q: %v", bucket, err)
	}
	return out.Status
}

// onlyBucket is the one backend bucket of the harness.
func (h *harness) onlyBucket() string {
	h.t.Helper()
	b := h.buckets()
	if len(b) != 1 {
		h.t.Fatalf("buckets = %v, want exactly one", b)
	}
	return b[0]
}

func TestVersionedPlan(t *testing.T) {
	t.Run("ProvisionTurnsVersioningOn", func(t *testing.T) {
		h := newHarness(t)
		id := instancePth + newID()
		h.want(h.do("PUT", id, provisionBody(planVer, map[string]any{"purge_on_delete": true})), http.StatusCreated, "provision versioned")
		bucket := h.onlyBucket()
		if got := h.versioningOf(bucket); got != s3types.BucketVersioningStatusEnabled {
			t.Fatalf("versioning of %s = %q, want Enabled", bucket, got)
		}
		// Two puts of one key leave two versions; the purge on deprovision
		// deletes them and their delete marker, or the bucket would stay.
		ctx := context.Background()
		for _, body := range []string{"one", "two"} {
			if _, err := h.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("k"), Body: strings.NewReader(body)}); err != nil {
				t.Fatalf("root: put: %v", err)
			}
		}
		if _, err := h.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String("k")}); err != nil {
			t.Fatalf("root: delete (a delete marker): %v", err)
		}
		h.want(h.do("DELETE", del(id, planVer, false), nil), http.StatusOK, "deprovision with purge")
		if h.bucketExists(bucket) {
			t.Errorf("bucket %s with object versions left after a purging deprovision", bucket)
		}
	})

	t.Run("PlanChanges", func(t *testing.T) {
		h := newHarness(t)
		id := instancePth + newID()
		h.want(h.do("PUT", id, provisionBody(planStd, nil)), http.StatusCreated, "provision standard")
		bucket := h.onlyBucket()
		if got := h.versioningOf(bucket); got != "" {
			t.Fatalf("versioning of a standard plan's bucket = %q, want never set", got)
		}
		// In order: each step starts from the state the one before left.
		for _, tc := range []struct {
			name   string
			reason string
			plan   string
			code   int
			want   s3types.BucketVersioningStatus
		}{
			{"to versioned", "a change to a versioned plan turns versioning on", planVer, http.StatusOK, s3types.BucketVersioningStatusEnabled},
			{"back to standard", "versioning cannot be turned off: the change is refused and the bucket keeps it",
				planStd, http.StatusUnprocessableEntity, s3types.BucketVersioningStatusEnabled},
			{"to read-only-bindings", "no plan without versioning is allowed", planRO, http.StatusUnprocessableEntity, s3types.BucketVersioningStatusEnabled},
		} {
			name := tc.name
			r := h.do("PATCH", id, map[string]any{"service_id": serviceID, "plan_id": tc.plan})
			if r.code != tc.code {
				t.Fatalf("%s: PATCH plan %s: got %d %v, want %d: %s", name, tc.plan, r.code, r.body, tc.code, tc.reason)
			}
			if tc.code == http.StatusUnprocessableEntity && !strings.Contains(r.str("description"), "versioning cannot be turned off") {
				t.Errorf("%s: refusal says %q, want it to say versioning cannot be turned off", name, r.str("description"))
			}
			if got := h.versioningOf(bucket); got != tc.want {
				t.Errorf("%s: versioning = %q, want %q: %s", name, got, tc.want, tc.reason)
			}
		}
		if g := h.want(h.do("GET", id, nil), http.StatusOK, "GET"); g.str("plan_id") != planVer {
			t.Errorf("plan after the refused changes = %q, want the versioned plan", g.str("plan_id"))
		}
		// Parameters still change under the versioned plan.
		h.want(h.do("PATCH", id, map[string]any{"service_id": serviceID, "plan_id": planVer, "parameters": map[string]any{"purge_on_delete": true}}),
			http.StatusOK, "parameter update under the versioned plan")
		h.want(h.do("DELETE", del(id, planVer, false), nil), http.StatusOK, "deprovision")
	})
}
