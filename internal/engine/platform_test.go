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
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// TestLastOperationUnknownOperation: an operation id the resource never had
// is the request's mistake (400); 404 is kept for a resource that does not
// exist, which a platform takes as "gone".
func TestLastOperationUnknownOperation(t *testing.T) {
	h := newHarness(t)
	inst := instancePth + newID()
	h.want(h.do("PUT", inst, provisionBody(planStd, nil)), http.StatusCreated, "provision")
	bind := inst + "/service_bindings/" + newID()
	h.want(h.do("PUT", bind, bindBody(planStd, nil)), http.StatusCreated, "bind")
	for _, path := range []string{inst, bind} {
		r := h.want(h.do("GET", path+"/last_operation?operation=never-started", nil), http.StatusBadRequest, "unknown operation of "+path)
		if r.str("description") == "" {
			t.Errorf("%s: 400 without a description", path)
		}
		h.want(h.do("GET", path+"/last_operation", nil), http.StatusOK, "no operation named: the latest one")
	}
	h.want(h.do("GET", instancePth+newID()+"/last_operation?operation=x", nil), http.StatusNotFound, "unknown instance")
	h.want(h.do("GET", inst+"/service_bindings/"+newID()+"/last_operation?operation=x", nil), http.StatusNotFound, "unknown binding")
}

// TestSyncBudget plays a platform that sends accepts_incomplete=true on
// every call, as Cloud Foundry and Kubernetes do: on a plan that does not
// require asynchrony, each operation that finishes within the sync budget
// is answered as a synchronous one, the bind's credentials included, with no
// poll. Plans that require asynchrony still answer 202.
func TestSyncBudget(t *testing.T) {
	h := newHarness(t, harnessOpts{syncBudget: 30 * time.Second})
	inst := instancePth + newID()
	r := h.want(h.do("PUT", async(inst), provisionBody(planStd, map[string]any{"purge_on_delete": true})), http.StatusCreated, "provision")
	if op := r.str("operation"); op != "" {
		t.Errorf("synchronous answer with operation %q", op)
	}
	h.want(h.do("GET", inst, nil), http.StatusOK, "GET after the provision's first answer")
	bind := inst + "/service_bindings/" + newID()
	r = h.want(h.do("PUT", async(bind), bindBody(planStd, nil)), http.StatusCreated, "bind")
	c := r.creds()
	ak, _ := c["access_key_id"].(string)
	sk, _ := c["secret_access_key"].(string)
	bucket, _ := c["bucket"].(string)
	if err := canWrite(ak, sk, bucket); err != nil {
		t.Fatalf("the first answer's credentials do not work: %v", err)
	}
	again := h.want(h.do("PUT", async(bind), bindBody(planStd, nil)), http.StatusOK, "bind again")
	if again.creds()["access_key_id"] != ak {
		t.Errorf("bind again: key %v, want the same %s", again.creds()["access_key_id"], ak)
	}
	h.want(h.do("PATCH", async(inst), map[string]any{"service_id": serviceID, "parameters": map[string]any{"labels": map[string]any{"team": "a"}}}),
		http.StatusOK, "update")
	h.want(h.do("DELETE", del(bind, planStd, true), nil), http.StatusOK, "unbind")
	if err := canWrite(ak, sk, bucket); err == nil {
		t.Error("the key still works after the unbind's 200")
	}
	h.want(h.do("DELETE", del(inst, planStd, true), nil), http.StatusOK, "deprovision")
	h.want(h.do("GET", inst, nil), http.StatusNotFound, "GET after the deprovision's 200")
	if n := h.metric("bucketbroker_sync_budget_answers_total"); n != 5 {
		t.Errorf("sync budget answers = %v, want 5 (one per operation)", n)
	}

	// standard-async requires asynchrony for its instance operations; its
	// bindings do not.
	ai := instancePth + newID()
	r = h.want(h.do("PUT", async(ai), provisionBody(planAsync, nil)), http.StatusAccepted, "provision on standard-async")
	if s := h.waitOp(ai, r.str("operation")); s != "succeeded" {
		t.Fatalf("provision ended %q", s)
	}
	r = h.want(h.do("PUT", async(ai+"/service_bindings/"+newID()), bindBody(planAsync, nil)), http.StatusCreated, "bind on standard-async")
	if r.creds() == nil {
		t.Error("bind on standard-async: no credentials")
	}
	h.want(h.do("PATCH", async(ai), map[string]any{"service_id": serviceID, "parameters": map[string]any{"labels": map[string]any{"team": "a"}}}),
		http.StatusAccepted, "update on standard-async")
}

// TestSyncBudgetRunsOut: an operation still running when the budget is
// spent is answered 202 and carries on; a duplicate meanwhile gets the
// spec's answer for an operation in progress (202, the same operation);
// once it ended, the duplicate gets the finished answer.
func TestSyncBudgetRunsOut(t *testing.T) {
	h := newHarness(t, harnessOpts{syncBudget: 200 * time.Millisecond})
	update := map[string]any{"service_id": serviceID, "parameters": map[string]any{"labels": map[string]any{"team": "b"}}}
	cases := []struct {
		name, method, call string
		body               any
		setup              func(inst, bind string)
		path               func(inst, bind string) string
		final              int
	}{
		{name: "provision", method: "PUT", call: "EnsureBucket", body: provisionBody(planStd, nil),
			setup: func(string, string) {}, path: func(i, _ string) string { return async(i) }, final: http.StatusOK},
		{name: "update", method: "PATCH", call: "EnsureBucket", body: update,
			setup: func(i, _ string) {
				h.want(h.do("PUT", i, provisionBody(planStd, nil)), http.StatusCreated, "provision")
			},
			path: func(i, _ string) string { return async(i) }, final: http.StatusOK},
		{name: "bind", method: "PUT", call: "EnsureCredential", body: bindBody(planStd, nil),
			setup: func(i, _ string) {
				h.want(h.do("PUT", i, provisionBody(planStd, nil)), http.StatusCreated, "provision")
			},
			path: func(_, b string) string { return async(b) }, final: http.StatusOK},
		{name: "unbind", method: "DELETE", call: "RevokeCredential",
			setup: func(i, b string) {
				h.want(h.do("PUT", i, provisionBody(planStd, nil)), http.StatusCreated, "provision")
				h.want(h.do("PUT", b, bindBody(planStd, nil)), http.StatusCreated, "bind")
			},
			path: func(_, b string) string { return del(b, planStd, true) }, final: http.StatusGone},
		{name: "deprovision", method: "DELETE", call: "DeleteBucket",
			setup: func(i, _ string) {
				h.want(h.do("PUT", i, provisionBody(planStd, nil)), http.StatusCreated, "provision")
			},
			path: func(i, _ string) string { return del(i, planStd, true) }, final: http.StatusGone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inst := instancePth + newID()
			bind := inst + "/service_bindings/" + newID()
			tc.setup(inst, bind)
			g := newGate()
			h.drv.hook(tc.call, g.hold)
			defer h.drv.hook(tc.call, nil)
			path := tc.path(inst, bind)
			first := h.want(h.do(tc.method, path, tc.body), http.StatusAccepted, "past the budget")
			g.waitEntered(t)
			dup := h.want(h.do(tc.method, path, tc.body), http.StatusAccepted, "duplicate while running")
			if dup.str("operation") != first.str("operation") || first.str("operation") == "" {
				t.Errorf("duplicate got operation %q, want %q", dup.str("operation"), first.str("operation"))
			}
			g.release()
			target := inst
			if tc.name == "bind" || tc.name == "unbind" {
				target = bind
			}
			if s := h.waitOp(target, first.str("operation")); s != "succeeded" {
				t.Fatalf("%s ended %q", tc.name, s)
			}
			h.want(h.do(tc.method, path, tc.body), tc.final, "again once it ended")
		})
	}
}

// TestSyncBudgetFailure: an operation that fails within the budget is
// answered as a synchronous one that failed (a refusal for good: 422), and
// the same request retries it.
func TestSyncBudgetFailure(t *testing.T) {
	h := newHarness(t, harnessOpts{syncBudget: 30 * time.Second})
	h.drv.hook("EnsureBucket", func(context.Context) error { return fmt.Errorf("injected: %w", driver.ErrInvalid) })
	inst := instancePth + newID()
	h.want(h.do("PUT", async(inst), provisionBody(planStd, nil)), http.StatusUnprocessableEntity, "provision refused")
	h.drv.hook("EnsureBucket", nil)
	h.want(h.do("PUT", async(inst), provisionBody(planStd, nil)), http.StatusCreated, "the same provision again")
}

// TestMaintenanceInfo: the plan's maintenance_info.version is checked on
// provision and update (422 MaintenanceInfoConflict, nothing changed), shown
// by GET, and an update naming it upgrades an instance provisioned at an
// older version: the plan's bucket settings are applied again.
func TestMaintenanceInfo(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	id := newID()
	inst := instancePth + id
	body := provisionBody(planStd, map[string]any{"labels": map[string]any{"team": "a"}})
	// An empty object is the same as none (clients generated from the
	// specification's OpenAPI document send {}); one that says something
	// but not its version is refused.
	body["maintenance_info"] = map[string]any{"description": "d"}
	h.want(h.do("PUT", inst, body), http.StatusBadRequest, "maintenance_info without a version")
	body["maintenance_info"] = map[string]any{"version": "2.0.0"}
	r := h.want(h.do("PUT", inst, body), http.StatusUnprocessableEntity, "provision at a version the plan is not at")
	if r.str("error") != "MaintenanceInfoConflict" {
		t.Errorf("error = %q, want MaintenanceInfoConflict", r.str("error"))
	}
	h.want(h.do("GET", inst, nil), http.StatusNotFound, "GET after the refused provision")

	body["maintenance_info"] = map[string]any{"version": "1.0.0"}
	h.want(h.do("PUT", inst, body), http.StatusCreated, "provision at the plan's version")
	g := h.want(h.do("GET", inst, nil), http.StatusOK, "GET")
	mi, _ := g.body["maintenance_info"].(map[string]any)
	if mi["version"] != "1.0.0" || mi["description"] == "" {
		t.Errorf("GET maintenance_info = %v, want version 1.0.0 with a description", g.body["maintenance_info"])
	}

	update := map[string]any{"service_id": serviceID, "maintenance_info": map[string]any{"version": "0.9.0"}}
	h.want(h.do("PATCH", inst, update), http.StatusUnprocessableEntity, "update to a version the plan is not at")

	// The instance as an older catalog left it: at 0.9.0, its bucket's
	// label tags gone (the owner mark kept).
	rec, err := h.store.Get(ctx, engine.KindInstance, id)
	if err != nil {
		t.Fatal(err)
	}
	rec.Request.Maintenance = "0.9.0"
	if err := h.store.Update(ctx, rec); err != nil {
		t.Fatal(err)
	}
	var kept []s3types.Tag
	for k, v := range bucketTags(t, h, rec.Bucket.Bucket) {
		if k != "team" {
			kept = append(kept, s3types.Tag{Key: aws.String(k), Value: aws.String(v)})
		}
	}
	if _, err := h.s3.PutBucketTagging(ctx, &s3.PutBucketTaggingInput{Bucket: aws.String(rec.Bucket.Bucket),
		Tagging: &s3types.Tagging{TagSet: kept}}); err != nil {
		t.Fatal(err)
	}
	g = h.want(h.do("GET", inst, nil), http.StatusOK, "GET before the upgrade")
	if mi, _ := g.body["maintenance_info"].(map[string]any); mi["version"] != "0.9.0" || mi["description"] != nil {
		t.Errorf("GET maintenance_info = %v, want version 0.9.0 without the plan's description", g.body["maintenance_info"])
	}
	h.want(h.do("PATCH", inst, map[string]any{"service_id": serviceID}), http.StatusOK, "update without maintenance_info")
	if tags := bucketTags(t, h, rec.Bucket.Bucket); tags["team"] != "" {
		t.Fatalf("an update that changes nothing re-applied the tags: %v", tags)
	}
	update["maintenance_info"] = map[string]any{"version": "1.0.0"}
	h.want(h.do("PATCH", inst, update), http.StatusOK, "upgrade")
	if tags := bucketTags(t, h, rec.Bucket.Bucket); tags["team"] != "a" {
		t.Errorf("tags after the upgrade = %v, want team=a again", tags)
	}
	g = h.want(h.do("GET", inst, nil), http.StatusOK, "GET after the upgrade")
	if mi, _ := g.body["maintenance_info"].(map[string]any); mi["version"] != "1.0.0" {
		t.Errorf("GET maintenance_info = %v, want version 1.0.0", g.body["maintenance_info"])
	}
	before, err := h.store.Get(ctx, engine.KindInstance, id)
	if err != nil {
		t.Fatal(err)
	}
	h.want(h.do("PATCH", inst, update), http.StatusOK, "upgrade again: nothing to do")
	if after, err := h.store.Get(ctx, engine.KindInstance, id); err != nil || after.Op.ID != before.Op.ID {
		t.Errorf("the second upgrade ran an operation (%v)", err)
	}
}

// TestBindingRotation: a bind naming predecessor_binding_id makes a new key
// with the predecessor's access; both work until the predecessor is
// unbound. A duplicate gets the same credentials, even after the
// predecessor is gone; a predecessor that does not exist is 400; the same
// binding id with another predecessor is 409.
func TestBindingRotation(t *testing.T) {
	h := newHarness(t)
	inst := instancePth + newID()
	h.want(h.do("PUT", inst, provisionBody(planStd, nil)), http.StatusCreated, "provision")
	old := inst + "/service_bindings/" + newID()
	oldID := old[strings.LastIndex(old, "/")+1:]
	oc := h.want(h.do("PUT", old, bindBody(planStd, map[string]any{"access": "write-only"})), http.StatusCreated, "bind").creds()

	rot := bindBody(planStd, nil)
	rot["predecessor_binding_id"] = oldID
	next := inst + "/service_bindings/" + newID()
	nc := h.want(h.do("PUT", next, rot), http.StatusCreated, "rotate").creds()
	if nc["access_key_id"] == oc["access_key_id"] || nc["access"] != "write-only" {
		t.Fatalf("rotation credentials = key %v access %v, want a new key with write-only access (predecessor's key %v)",
			nc["access_key_id"], nc["access"], oc["access_key_id"])
	}
	for what, c := range map[string]map[string]any{"predecessor": oc, "successor": nc} {
		if err := canPut(c); err != nil {
			t.Errorf("%s's key after the rotation: %v", what, err)
		}
	}
	again := h.want(h.do("PUT", next, rot), http.StatusOK, "rotate again").creds()
	if again["access_key_id"] != nc["access_key_id"] {
		t.Errorf("duplicate rotation: key %v, want %v", again["access_key_id"], nc["access_key_id"])
	}
	other := bindBody(planStd, nil)
	other["predecessor_binding_id"] = newID()
	h.want(h.do("PUT", next, other), http.StatusConflict, "same binding id, another predecessor")
	h.want(h.do("PUT", inst+"/service_bindings/"+newID(), other), http.StatusBadRequest, "predecessor that does not exist")
	ro := bindBody(planStd, map[string]any{"access": "read-only"})
	ro["predecessor_binding_id"] = oldID
	h.want(h.do("PUT", inst+"/service_bindings/"+newID(), ro), http.StatusBadRequest, "rotation asking for another access")

	h.want(h.do("DELETE", del(old, planStd, false), nil), http.StatusOK, "unbind the predecessor")
	if err := canPut(oc); err == nil {
		t.Error("the predecessor's key works after its unbind")
	}
	if err := canPut(nc); err != nil {
		t.Errorf("the successor's key after the predecessor's unbind: %v", err)
	}
	again = h.want(h.do("PUT", next, rot), http.StatusOK, "rotate again after the predecessor is gone").creds()
	if again["access_key_id"] != nc["access_key_id"] {
		t.Errorf("duplicate rotation after the unbind: key %v, want %v", again["access_key_id"], nc["access_key_id"])
	}
	h.want(h.do("PUT", inst+"/service_bindings/"+newID(), rot), http.StatusBadRequest, "rotation of an unbound predecessor")
}

// canPut writes an object with a binding's credentials (what a write-only
// key may do).
func canPut(c map[string]any) error {
	ak, _ := c["access_key_id"].(string)
	sk, _ := c["secret_access_key"].(string)
	bucket, _ := c["bucket"].(string)
	_, err := s3Client(ak, sk, nil).PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket),
		Key: aws.String("put-probe"), Body: strings.NewReader("x")})
	return err
}

// TestBindingRotationRacesUnbind: a rotation and its predecessor's unbind
// do not wait for each other. A predecessor being unbound cannot be
// rotated (400); a rotation in progress when its predecessor is unbound
// finishes with its own key, one key made, and the predecessor's dies.
func TestBindingRotationRacesUnbind(t *testing.T) {
	h := newHarness(t)
	inst := instancePth + newID()
	h.want(h.do("PUT", inst, provisionBody(planStd, nil)), http.StatusCreated, "provision")

	pred := newID()
	h.want(h.do("PUT", inst+"/service_bindings/"+pred, bindBody(planStd, nil)), http.StatusCreated, "bind")
	g := newGate()
	h.drv.hook("RevokeCredential", g.hold)
	u := h.want(h.do("DELETE", del(inst+"/service_bindings/"+pred, planStd, true), nil), http.StatusAccepted, "unbind the predecessor")
	g.waitEntered(t)
	rot := bindBody(planStd, nil)
	rot["predecessor_binding_id"] = pred
	h.want(h.do("PUT", inst+"/service_bindings/"+newID(), rot), http.StatusBadRequest, "rotation of a predecessor being unbound")
	h.drv.hook("RevokeCredential", nil)
	g.release()
	if s := h.waitOp(inst+"/service_bindings/"+pred, u.str("operation")); s != "succeeded" {
		t.Fatalf("unbind ended %q", s)
	}

	pred = newID()
	oc := h.want(h.do("PUT", inst+"/service_bindings/"+pred, bindBody(planStd, nil)), http.StatusCreated, "bind").creds()
	rot["predecessor_binding_id"] = pred
	g = newGate()
	h.drv.hook("EnsureCredential", g.hold)
	next := inst + "/service_bindings/" + newID()
	r := h.want(h.do("PUT", async(next), rot), http.StatusAccepted, "rotation, held")
	g.waitEntered(t)
	h.want(h.do("DELETE", del(inst+"/service_bindings/"+pred, planStd, false), nil), http.StatusOK, "unbind the predecessor meanwhile")
	h.drv.hook("EnsureCredential", nil)
	g.release()
	if s := h.waitOp(next, r.str("operation")); s != "succeeded" {
		t.Fatalf("rotation ended %q", s)
	}
	nc := h.want(h.do("PUT", next, rot), http.StatusOK, "the rotation's credentials").creds()
	if err := canPut(nc); err != nil {
		t.Errorf("the successor's key: %v", err)
	}
	if err := canPut(oc); err == nil {
		t.Error("the predecessor's key works after its unbind")
	}
	users := h.users()
	if len(users) != 1 {
		t.Errorf("users = %v, want only the successor's", users)
	}
	for u, ks := range users {
		if len(ks) != 1 || ks[0] != nc["access_key_id"] {
			t.Errorf("user %s keys = %v, want only %v", u, ks, nc["access_key_id"])
		}
	}
}

// TestSyncBudgetDuplicateWhileWaiting: a duplicate that arrives while the
// first request still waits within its budget gets the spec's answer for
// an operation in progress, 202 with the operation; the first request is
// then answered as a synchronous one.
func TestSyncBudgetDuplicateWhileWaiting(t *testing.T) {
	h := newHarness(t, harnessOpts{syncBudget: 30 * time.Second})
	g := newGate()
	h.drv.hook("EnsureBucket", g.hold)
	defer h.drv.hook("EnsureBucket", nil)
	inst := instancePth + newID()
	first := make(chan reply, 1)
	go func() { first <- h.do("PUT", async(inst), provisionBody(planStd, nil)) }()
	g.waitEntered(t)
	dup := h.want(h.do("PUT", async(inst), provisionBody(planStd, nil)), http.StatusAccepted, "duplicate while the first waits")
	if dup.str("operation") == "" {
		t.Error("202 without an operation")
	}
	g.release()
	h.want(<-first, http.StatusCreated, "the first request")
	if s := h.waitOp(inst, dup.str("operation")); s != "succeeded" {
		t.Errorf("the duplicate's operation = %q, want succeeded", s)
	}
}
