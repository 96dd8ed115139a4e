package engine_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// TestProvisionStatusTable walks every row of the table "OSB answers" in
// docs/architecture.md for instances, synchronously and asynchronously,
// through real HTTP, the real SQLite store and the embedded S3 server.
func TestProvisionStatusTable(t *testing.T) { testProvisionStatusTable(t, newHarness(t)) }

// TestProvisionStatusTablePostgres runs the same table with the state in PostgreSQL.
func TestProvisionStatusTablePostgres(t *testing.T) {
	testProvisionStatusTable(t, newHarness(t, harnessOpts{postgres: true}))
}

func testProvisionStatusTable(t *testing.T, h *harness) {
	std := provisionBody(planStd, nil)
	other := provisionBody(planStd, map[string]any{"labels": map[string]any{"team": "b"}})

	t.Run("none: sync 201, async 202 with an operation", func(t *testing.T) {
		id := instancePth + newID()
		h.want(h.do("PUT", id, std), http.StatusCreated, "sync new")
		id2 := instancePth + newID()
		r := h.want(h.do("PUT", async(id2), std), http.StatusAccepted, "async new")
		if r.str("operation") == "" {
			t.Fatal("202 without an operation")
		}
		if s := h.waitOp(id2, r.str("operation")); s != "succeeded" {
			t.Fatalf("async provision ended %q", s)
		}
	})

	t.Run("in progress: same -> 202 same operation (async), sync waits then 200; different -> 409", func(t *testing.T) {
		g := newGate()
		h.drv.hook("EnsureBucket", g.hold)
		defer h.drv.hook("EnsureBucket", nil)
		id := instancePth + newID()
		first := h.want(h.do("PUT", async(id), std), http.StatusAccepted, "first")
		g.waitEntered(t)
		again := h.want(h.do("PUT", async(id), std), http.StatusAccepted, "duplicate while in progress")
		if again.str("operation") != first.str("operation") {
			t.Errorf("duplicate got operation %q, want the same %q", again.str("operation"), first.str("operation"))
		}
		h.want(h.do("PUT", async(id), other), http.StatusConflict, "different while in progress")
		h.want(h.do("GET", id, nil), http.StatusNotFound, "GET while provisioning")

		syncDone := make(chan reply)
		go func() { syncDone <- h.do("PUT", id, std) }()
		g.release()
		h.want(<-syncDone, http.StatusOK, "sync duplicate after the in-flight work")
		if s := h.waitOp(id, first.str("operation")); s != "succeeded" {
			t.Fatalf("provision ended %q", s)
		}
	})

	t.Run("succeeded: same -> 200, different -> 409, GET shows it", func(t *testing.T) {
		id := instancePth + newID()
		h.want(h.do("PUT", id, std), http.StatusCreated, "new")
		h.want(h.do("PUT", id, std), http.StatusOK, "same again")
		h.want(h.do("PUT", async(id), std), http.StatusOK, "same again, async")
		h.want(h.do("PUT", id, other), http.StatusConflict, "different")
		// Key order and white space do not make a request different.
		h.want(h.do("PUT", id, map[string]any{"space_guid": "space", "organization_guid": "org", "plan_id": planStd, "service_id": serviceID, "parameters": map[string]any{}}),
			http.StatusOK, "same with empty parameters and another key order")
		g := h.want(h.do("GET", id, nil), http.StatusOK, "GET")
		if g.str("plan_id") != planStd || g.str("service_id") != serviceID {
			t.Errorf("GET = %v", g.body)
		}
		if n := len(h.buckets()); n == 0 {
			t.Error("no bucket on the backend")
		}
	})

	t.Run("failed: same -> the steps are retried (201/202), different -> 409", func(t *testing.T) {
		h.drv.hook("EnsureBucket", func(context.Context) error { return fmt.Errorf("injected: %w", driver.ErrInvalid) })
		id := instancePth + newID()
		r := h.do("PUT", id, std)
		// A refusal for good is the request's error: 422, not 500.
		h.want(r, http.StatusUnprocessableEntity, "sync provision with a permanent backend error")
		h.want(h.do("PUT", async(id), other), http.StatusConflict, "different after failure")
		h.drv.hook("EnsureBucket", nil)
		r = h.want(h.do("PUT", async(id), std), http.StatusAccepted, "retry after failure")
		if s := h.waitOp(id, r.str("operation")); s != "succeeded" {
			t.Fatalf("retried provision ended %q", s)
		}
		h.want(h.do("PUT", id, std), http.StatusOK, "same after the retry succeeded")
	})

	t.Run("deprovisioning: same -> 422 ConcurrencyError, different -> 409", func(t *testing.T) {
		id := instancePth + newID()
		h.want(h.do("PUT", id, std), http.StatusCreated, "new")
		g := newGate()
		h.drv.hook("DeleteBucket", g.hold)
		defer h.drv.hook("DeleteBucket", nil)
		d := h.want(h.do("DELETE", del(id, planStd, true), nil), http.StatusAccepted, "async delete")
		g.waitEntered(t)
		r := h.want(h.do("PUT", async(id), std), http.StatusUnprocessableEntity, "same while deprovisioning")
		if r.str("error") != "ConcurrencyError" {
			t.Errorf("error = %q, want ConcurrencyError", r.str("error"))
		}
		h.want(h.do("PUT", async(id), other), http.StatusConflict, "different while deprovisioning")
		d2 := h.want(h.do("DELETE", del(id, planStd, true), nil), http.StatusAccepted, "duplicate delete")
		if d2.str("operation") != d.str("operation") {
			t.Errorf("duplicate delete got operation %q, want %q", d2.str("operation"), d.str("operation"))
		}
		g.release()
		if s := h.waitOp(id, d.str("operation")); s != "succeeded" {
			t.Fatalf("deprovision ended %q", s)
		}
		// Platforms poll late: the finished deprovision still answers.
		if s := h.waitOp(id, d.str("operation")); s != "succeeded" {
			t.Errorf("late poll of the deprovision = %q, want succeeded", s)
		}
		h.want(h.do("DELETE", del(id, planStd, false), nil), http.StatusGone, "delete after delete")
		h.want(h.do("GET", id, nil), http.StatusNotFound, "GET after delete")
	})

	t.Run("delete of an unknown id -> 410", func(t *testing.T) {
		h.want(h.do("DELETE", del(instancePth+newID(), planStd, false), nil), http.StatusGone, "unknown")
		h.want(h.do("DELETE", del(instancePth+newID(), planStd, true), nil), http.StatusGone, "unknown, async")
	})

	t.Run("sync delete -> 200 and the bucket is gone", func(t *testing.T) {
		before := len(h.buckets())
		id := instancePth + newID()
		h.want(h.do("PUT", id, std), http.StatusCreated, "new")
		if len(h.buckets()) != before+1 {
			t.Fatalf("buckets = %d, want %d", len(h.buckets()), before+1)
		}
		h.want(h.do("DELETE", del(id, planStd, false), nil), http.StatusOK, "sync delete")
		if len(h.buckets()) != before {
			t.Fatalf("buckets after delete = %d, want %d", len(h.buckets()), before)
		}
		// The id can be used again once deleted.
		h.want(h.do("PUT", id, other), http.StatusCreated, "reuse of a deleted id")
	})
}

func TestBadRequestsChangeNothing(t *testing.T) {
	h := newHarness(t)
	for name, tc := range map[string]struct {
		reason string
		body   map[string]any
		code   int
		errKey string
	}{
		"unknown plan":         {"the plan must be in the catalog", map[string]any{"service_id": serviceID, "plan_id": "nope", "organization_guid": "o", "space_guid": "s"}, 400, ""},
		"unknown service":      {"the service must be in the catalog", map[string]any{"service_id": "nope", "plan_id": planStd, "organization_guid": "o", "space_guid": "s"}, 400, ""},
		"schema violation":     {"parameters must pass the plan schema", provisionBody(planStd, map[string]any{"size": "xl"}), 400, ""},
		"async-only plan sync": {"AsyncRequired without accepts_incomplete", provisionBody(planAsync, nil), 422, "AsyncRequired"},
	} {
		t.Run(name, func(t *testing.T) {
			id := instancePth + newID()
			r := h.do("PUT", id, tc.body)
			if r.code != tc.code || (tc.errKey != "" && r.str("error") != tc.errKey) {
				t.Fatalf("%s: got %d %v, want %d %s", tc.reason, r.code, r.body, tc.code, tc.errKey)
			}
			h.want(h.do("GET", id, nil), http.StatusNotFound, "nothing recorded")
		})
	}
	if n := len(h.buckets()); n != 0 {
		t.Errorf("bad requests created %d buckets", n)
	}
}

func TestDeleteDuringProvisionHaltsAndCleansUp(t *testing.T) {
	h := newHarness(t)
	g := newGate()
	// The bucket is created, then the provision is held before it records
	// success: the delete must remove what the provision already made.
	h.drv.hook("EnsureBucket/after", g.hold)
	id := instancePth + newID()
	p := h.want(h.do("PUT", async(id), provisionBody(planStd, nil)), http.StatusAccepted, "provision")
	g.waitEntered(t)
	if b := h.buckets(); len(b) != 1 {
		t.Fatalf("buckets while the provision is held = %v, want one", b)
	}
	d := h.want(h.do("DELETE", del(id, planStd, true), nil), http.StatusAccepted, "delete during provision")
	g.release()
	if s := h.waitOp(id, d.str("operation")); s != "succeeded" {
		t.Fatalf("deprovision ended %q", s)
	}
	if s := h.waitOp(id, p.str("operation")); s != "failed" {
		t.Errorf("halted provision reads %q, want failed", s)
	}
	if b := h.buckets(); len(b) != 0 {
		t.Errorf("buckets left after delete during provision: %v", b)
	}
}

func TestUpdate(t *testing.T) {
	h := newHarness(t)
	id := instancePth + newID()
	h.want(h.do("PUT", id, provisionBody(planStd, nil)), http.StatusCreated, "provision")
	patch := func(plan string, params map[string]any, async bool) reply {
		b := map[string]any{"service_id": serviceID}
		if plan != "" {
			b["plan_id"] = plan
		}
		if params != nil {
			b["parameters"] = params
		}
		p := id
		if async {
			p += "?accepts_incomplete=true"
		}
		return h.do("PATCH", p, b)
	}
	h.want(patch("", map[string]any{"labels": map[string]any{"team": "a"}}, false), http.StatusOK, "sync label update")
	r := h.want(patch(planRO, nil, true), http.StatusAccepted, "async plan change")
	if s := h.waitOp(id, r.str("operation")); s != "succeeded" {
		t.Fatalf("update ended %q", s)
	}
	g := h.want(h.do("GET", id, nil), http.StatusOK, "GET after update")
	if g.str("plan_id") != planRO {
		t.Errorf("plan after update = %q, want %q", g.str("plan_id"), planRO)
	}
	params, _ := g.body["parameters"].(map[string]any)
	if labels, _ := params["labels"].(map[string]any); labels["team"] != "a" {
		t.Errorf("parameters after update = %v, want labels.team=a kept", g.body["parameters"])
	}
	h.want(patch("nope", nil, false), http.StatusBadRequest, "unknown plan")
	h.want(patch("", map[string]any{"bogus": 1}, false), http.StatusBadRequest, "schema violation")

	// A read-write binding forbids a change back to... itself is fine; make
	// one under the standard plan and then try the read-only plan.
	id2 := instancePth + newID()
	h.want(h.do("PUT", id2, provisionBody(planStd, nil)), http.StatusCreated, "provision 2")
	h.want(h.do("PUT", id2+"/service_bindings/"+newID(), bindBody(planStd, nil)), http.StatusCreated, "rw binding")
	b := map[string]any{"service_id": serviceID, "plan_id": planRO}
	h.want(h.do("PATCH", id2, b), http.StatusUnprocessableEntity, "plan change the bindings forbid")
	if g := h.want(h.do("GET", id2, nil), http.StatusOK, "GET"); g.str("plan_id") != planStd {
		t.Errorf("a refused update changed the plan to %q", g.str("plan_id"))
	}
	h.want(h.do("PATCH", instancePth+newID(), b), http.StatusNotFound, "update of unknown instance")
}

// TestConcurrentProvisionStorm fires many identical PUTs at once: exactly
// one bucket, one 201 (sync), the rest 200.
func TestConcurrentProvisionStorm(t *testing.T) {
	h := newHarness(t)
	const n = 200
	id := instancePth + newID()
	// The look at the bucket name before the intent is written is held
	// until a second look starts (or a while passes): duplicates that
	// arrive meanwhile must wait for the first request's record, not each
	// make the same look and an insert that can only lose.
	second := make(chan struct{})
	var once sync.Once
	h.drv.hook("Observe", func(ctx context.Context) error {
		if h.drv.count("Observe") > 1 {
			once.Do(func() { close(second) })
			return nil
		}
		select {
		case <-second:
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
		return nil
	})
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = h.do("PUT", id, provisionBody(planStd, nil)).code
		}()
	}
	wg.Wait()
	count := map[int]int{}
	for _, c := range codes {
		count[c]++
	}
	if count[201] != 1 || count[200] != n-1 {
		t.Errorf("status codes = %v, want one 201 and %d 200", count, n-1)
	}
	if b := h.buckets(); len(b) != 1 {
		t.Errorf("buckets = %v, want exactly one", b)
	}
	if c := h.drv.count("EnsureBucket"); c != 1 {
		t.Errorf("EnsureBucket called %d times, want 1", c)
	}
	if c := h.drv.count("Observe"); c != 1 {
		t.Errorf("Observe called %d times, want 1 (the first request's look)", c)
	}
}

func TestBucketOwnedByOtherIsRefusedAndUntouched(t *testing.T) {
	h := newHarness(t)
	raw := newID()
	name := driver.BucketName(h.prefix, "instance", raw)
	ctx := context.Background()
	if _, err := h.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(name), Key: aws.String("theirs"), Body: strings.NewReader("x")}); err != nil {
		t.Fatal(err)
	}
	id := instancePth + raw
	r := h.do("PUT", async(id), provisionBody(planStd, nil))
	if s := h.waitOp(id, r.str("operation")); s != "failed" {
		t.Fatalf("provision over a foreign bucket ended %q, want failed", s)
	}
	if d := h.do("GET", id+"/last_operation", nil).str("description"); !strings.Contains(d, "owned by someone else") {
		t.Errorf("failure description %q should say the bucket is someone else's", d)
	}
	// Orphan mitigation by the platform must not delete it either.
	h.want(h.do("DELETE", del(id, planStd, false), nil), http.StatusOK, "delete the failed instance")
	if _, err := h.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(name), Key: aws.String("theirs")}); err != nil {
		t.Errorf("the foreign bucket's object is gone: %v", err)
	}
}
