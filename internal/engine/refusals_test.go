package engine_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// badLabels are labels the plan's schema let through before it stated
// S3's limits, each of a kind the backend refuses as a bucket tag.
var badLabels = map[string]map[string]any{
	"symbol":                    {"k": "☃"},
	"ampersand":                 {"k": "a&b"},
	"control character":         {"k": "a\x01b"},
	"256 characters, 512 bytes": {"k": strings.Repeat("ü", 256)},
}

// TestBadLabelsChangeNothing: labels S3 would refuse as tags are a 400
// before anything is recorded or created, synchronous or not, and a PATCH
// with them leaves the instance and its bucket as they were, rather than
// create the bucket and fail to tag it (a 500, or a failed asynchronous
// operation, with the bucket left).
func TestBadLabelsChangeNothing(t *testing.T) {
	for name, labels := range badLabels {
		for _, sync := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s sync=%v", name, sync), func(t *testing.T) {
				h := newHarness(t)
				id := instancePth + newID()
				path := id
				if !sync {
					path = async(id)
				}
				r := h.want(h.do("PUT", path, provisionBody(planStd, map[string]any{"labels": labels})), http.StatusBadRequest, "provision")
				if d := r.str("description"); !strings.Contains(d, "labels") {
					t.Errorf("description %q does not name the labels", d)
				}
				h.want(h.do("GET", id, nil), http.StatusNotFound, "GET of the refused instance")
				if b := h.buckets(); len(b) != 0 {
					t.Errorf("buckets after a refused provision: %v", b)
				}
			})
		}
	}

	t.Run("update", func(t *testing.T) {
		h := newHarness(t)
		id := instancePth + newID()
		h.want(h.do("PUT", id, provisionBody(planStd, map[string]any{"labels": map[string]any{"team": "a"}})), http.StatusCreated, "provision")
		bucket := h.onlyBucket()
		for name, labels := range badLabels {
			r := h.do("PATCH", id, map[string]any{"service_id": serviceID, "parameters": map[string]any{"labels": labels}})
			if r.code != http.StatusBadRequest {
				t.Fatalf("%s: PATCH: %d %v, want 400", name, r.code, r.body)
			}
		}
		out, err := h.s3.GetBucketTagging(context.Background(), &s3.GetBucketTaggingInput{Bucket: aws.String(bucket)})
		if err != nil {
			t.Fatal(err)
		}
		for _, tag := range out.TagSet {
			if aws.ToString(tag.Key) == "team" && aws.ToString(tag.Value) != "a" {
				t.Errorf("tag team = %q after refused updates, want a", aws.ToString(tag.Value))
			}
		}
		g := h.want(h.do("GET", id, nil), http.StatusOK, "GET")
		if p, _ := g.body["parameters"].(map[string]any); fmt.Sprint(p["labels"]) != "map[team:a]" {
			t.Errorf("parameters after refused updates = %v", g.body["parameters"])
		}
		h.want(h.do("DELETE", del(id, planStd, false), nil), http.StatusOK, "deprovision")
	})
}

// errRefusal is what the s3iam driver returns when the server refuses a call
// for good; its plain text is held to the real server in s3iam's tests.
var errRefusal = fmt.Errorf("turn on versioning of bucket: %w: the server does not support versioning (VersioningNotConfigured: Versioning has not been configured)", driver.ErrInvalid)

// TestBackendRefusalIsTheClients: whatever the backend still refuses for
// good after the door's checks ends the operation as the request's error,
// 422 with the refusal as description (never a 500, which tells a platform
// to clean up after us), and what the operation made before the refusal
// is removed: the platform, told its request failed, will not.
func TestBackendRefusalIsTheClients(t *testing.T) {
	t.Run("provision sync", func(t *testing.T) {
		h := newHarness(t)
		h.drv.hook("EnsureBucket/after", func(context.Context) error { return errRefusal })
		id := instancePth + newID()
		r := h.want(h.do("PUT", id, provisionBody(planStd, nil)), http.StatusUnprocessableEntity, "provision refused after the bucket was made")
		if d := r.str("description"); !strings.Contains(d, "does not support versioning") {
			t.Errorf("description = %q, want the refusal", d)
		}
		if b := h.buckets(); len(b) != 0 {
			t.Errorf("buckets after the refused provision: %v, want none", b)
		}
		h.drv.hook("EnsureBucket/after", nil)
		h.want(h.do("PUT", id, provisionBody(planStd, nil)), http.StatusCreated, "the same provision, accepted now")
		h.want(h.do("DELETE", del(id, planStd, false), nil), http.StatusOK, "deprovision")
		if b := h.buckets(); len(b) != 0 {
			t.Errorf("buckets after the deprovision: %v", b)
		}
	})

	t.Run("provision async", func(t *testing.T) {
		h := newHarness(t)
		h.drv.hook("EnsureBucket/after", func(context.Context) error { return errRefusal })
		id := instancePth + newID()
		r := h.want(h.do("PUT", async(id), provisionBody(planStd, nil)), http.StatusAccepted, "async provision")
		if st := h.waitOp(id, r.str("operation")); st != "failed" {
			t.Fatalf("operation = %s, want failed", st)
		}
		lo := h.do("GET", id+"/last_operation?operation="+r.str("operation"), nil)
		if d := lo.str("description"); !strings.Contains(d, "does not support versioning") {
			t.Errorf("description = %q, want the refusal", d)
		}
		if b := h.buckets(); len(b) != 0 {
			t.Errorf("buckets after the refused provision: %v, want none", b)
		}
		h.want(h.do("DELETE", del(id, planStd, false), nil), http.StatusOK, "deprovision of the failed instance")
	})

	t.Run("update", func(t *testing.T) {
		h := newHarness(t)
		id := instancePth + newID()
		h.want(h.do("PUT", id, provisionBody(planStd, nil)), http.StatusCreated, "provision")
		h.drv.hook("EnsureBucket/after", func(context.Context) error { return errRefusal })
		h.want(h.do("PATCH", id, map[string]any{"service_id": serviceID, "parameters": map[string]any{"purge_on_delete": true}}),
			http.StatusUnprocessableEntity, "update refused")
		h.drv.hook("EnsureBucket/after", nil)
		if b := h.buckets(); len(b) != 1 {
			t.Errorf("buckets after a refused update: %v, want the instance's", b)
		}
		if g := h.want(h.do("GET", id, nil), http.StatusOK, "GET"); g.body["parameters"] != nil {
			t.Errorf("parameters after the refused update = %v, want none", g.body["parameters"])
		}
		h.want(h.do("DELETE", del(id, planStd, false), nil), http.StatusOK, "deprovision")
	})

	t.Run("bind", func(t *testing.T) {
		h := newHarness(t)
		id := instancePth + newID()
		h.want(h.do("PUT", id, provisionBody(planStd, nil)), http.StatusCreated, "provision")
		h.drv.hook("EnsureCredential/after", func(context.Context) error { return errRefusal })
		bid := id + "/service_bindings/" + newID()
		h.want(h.do("PUT", bid, bindBody(planStd, nil)), http.StatusUnprocessableEntity, "bind refused after the user was made")
		if u := h.users(); len(u) != 0 {
			t.Errorf("users after the refused bind: %v, want none", u)
		}
		h.drv.hook("EnsureCredential/after", nil)
		h.want(h.do("DELETE", del(id, planStd, false), nil), http.StatusOK, "deprovision")
	})
}
