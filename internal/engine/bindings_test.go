package engine_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

func (h *harness) provisioned(plan string) string {
	h.t.Helper()
	id := instancePth + newID()
	h.want(h.do("PUT", id, provisionBody(plan, nil)), http.StatusCreated, "provision")
	return id
}

func TestBindStatusTable(t *testing.T) { testBindStatusTable(t, newHarness(t)) }

// TestBindStatusTablePostgres runs the same table with the state in PostgreSQL.
func TestBindStatusTablePostgres(t *testing.T) {
	testBindStatusTable(t, newHarness(t, harnessOpts{postgres: true}))
}

func testBindStatusTable(t *testing.T, h *harness) {
	inst := h.provisioned(planStd)
	rw := bindBody(planStd, nil)
	ro := bindBody(planStd, map[string]any{"access": "read-only"})

	t.Run("none: sync 201 with credentials, async 202 without", func(t *testing.T) {
		r := h.want(h.do("PUT", inst+"/service_bindings/"+newID(), rw), http.StatusCreated, "sync bind")
		c := r.creds()
		if c["access_key_id"] == "" || c["secret_access_key"] == "" || c["bucket"] == "" || c["endpoint"] == "" {
			t.Fatalf("credentials = %v", c)
		}
		if err := canWrite(c["access_key_id"].(string), c["secret_access_key"].(string), c["bucket"].(string)); err != nil {
			t.Errorf("the credentials do not work: %v", err)
		}
		b := inst + "/service_bindings/" + newID()
		a := h.want(h.do("PUT", async(b), rw), http.StatusAccepted, "async bind")
		if a.creds() != nil {
			t.Error("a 202 carries credentials")
		}
		if s := h.waitOp(b, a.str("operation")); s != "succeeded" {
			t.Fatalf("async bind ended %q", s)
		}
		g := h.want(h.do("GET", b, nil), http.StatusOK, "GET binding")
		if g.creds()["access_key_id"] == "" {
			t.Errorf("GET binding = %v", g.body)
		}
	})

	t.Run("in progress: same -> 202 same op / sync waits then 200 same creds; different -> 409", func(t *testing.T) {
		g := newGate()
		h.drv.hook("EnsureCredential", g.hold)
		defer h.drv.hook("EnsureCredential", nil)
		b := inst + "/service_bindings/" + newID()
		first := h.want(h.do("PUT", async(b), rw), http.StatusAccepted, "first")
		g.waitEntered(t)
		again := h.want(h.do("PUT", async(b), rw), http.StatusAccepted, "duplicate")
		if again.str("operation") != first.str("operation") {
			t.Errorf("duplicate operation %q, want %q", again.str("operation"), first.str("operation"))
		}
		h.want(h.do("PUT", async(b), ro), http.StatusConflict, "different while in progress")
		h.want(h.do("GET", b, nil), http.StatusNotFound, "GET while in progress")
		done := make(chan reply)
		go func() { done <- h.do("PUT", b, rw) }()
		g.release()
		r := h.want(<-done, http.StatusOK, "sync duplicate")
		g2 := h.want(h.do("GET", b, nil), http.StatusOK, "GET")
		if r.creds()["secret_access_key"] != g2.creds()["secret_access_key"] || r.creds()["secret_access_key"] == nil {
			t.Error("the sync duplicate's credentials differ from the binding's")
		}
	})

	t.Run("succeeded: same -> 200 with the SAME credentials, different -> 409, same id under another instance -> 409", func(t *testing.T) {
		b := inst + "/service_bindings/" + newID()
		first := h.want(h.do("PUT", b, rw), http.StatusCreated, "bind")
		second := h.want(h.do("PUT", b, rw), http.StatusOK, "same again")
		if first.creds()["access_key_id"] != second.creds()["access_key_id"] || first.creds()["secret_access_key"] != second.creds()["secret_access_key"] {
			t.Errorf("a duplicate bind returned other credentials")
		}
		h.want(h.do("PUT", b, ro), http.StatusConflict, "different")
		other := h.provisioned(planStd)
		bid := b[len(inst+"/service_bindings/"):]
		h.want(h.do("PUT", other+"/service_bindings/"+bid, rw), http.StatusConflict, "same binding id under another instance")
		if n := len(h.users()[driver.UserName(h.prefix, "binding", bid)]); n != 1 {
			t.Errorf("live keys for the binding = %d, want 1", n)
		}
	})

	t.Run("failed: same -> retried, different -> 409", func(t *testing.T) {
		h.drv.hook("EnsureCredential", func(context.Context) error { return fmt.Errorf("injected: %w", driver.ErrInvalid) })
		b := inst + "/service_bindings/" + newID()
		h.want(h.do("PUT", b, rw), http.StatusUnprocessableEntity, "failing bind (refused for good: the request's error)")
		h.want(h.do("PUT", b, ro), http.StatusConflict, "different after failure")
		h.drv.hook("EnsureCredential", nil)
		h.want(h.do("PUT", b, rw), http.StatusCreated, "retry after failure")
	})

	t.Run("unbinding: same -> 422, unbind twice -> 410, revoked key rejected", func(t *testing.T) {
		b := inst + "/service_bindings/" + newID()
		c := h.want(h.do("PUT", b, rw), http.StatusCreated, "bind").creds()
		g := newGate()
		h.drv.hook("RevokeCredential", g.hold)
		u := h.want(h.do("DELETE", del(b, planStd, true), nil), http.StatusAccepted, "async unbind")
		g.waitEntered(t)
		r := h.want(h.do("PUT", b, rw), http.StatusUnprocessableEntity, "same while unbinding")
		if r.str("error") != "ConcurrencyError" {
			t.Errorf("error = %q", r.str("error"))
		}
		h.drv.hook("RevokeCredential", nil)
		g.release()
		if s := h.waitOp(b, u.str("operation")); s != "succeeded" {
			t.Fatalf("unbind ended %q", s)
		}
		h.want(h.do("DELETE", del(b, planStd, false), nil), http.StatusGone, "unbind again")
		h.want(h.do("DELETE", del(inst+"/service_bindings/"+newID(), planStd, false), nil), http.StatusGone, "unbind unknown")
		if err := canWrite(c["access_key_id"].(string), c["secret_access_key"].(string), c["bucket"].(string)); err == nil {
			t.Error("a revoked key still works")
		}
	})

	t.Run("bind to an unknown instance -> 400, to a provisioning one -> 422", func(t *testing.T) {
		h.want(h.do("PUT", instancePth+newID()+"/service_bindings/"+newID(), rw), http.StatusBadRequest, "unknown instance")
		g := newGate()
		h.drv.hook("EnsureBucket", g.hold)
		defer h.drv.hook("EnsureBucket", nil)
		p := instancePth + newID()
		h.want(h.do("PUT", async(p), provisionBody(planStd, nil)), http.StatusAccepted, "provision")
		g.waitEntered(t)
		h.want(h.do("PUT", p+"/service_bindings/"+newID(), rw), http.StatusUnprocessableEntity, "bind while provisioning")
		g.release()
	})
}

func TestReadOnlyBindingsAreReadOnly(t *testing.T) {
	h := newHarness(t)
	inst := h.provisioned(planRO)
	h.want(h.do("PUT", inst+"/service_bindings/"+newID(), bindBody(planRO, map[string]any{"access": "read-write"})), http.StatusBadRequest, "rw on a read-only plan")
	c := h.want(h.do("PUT", inst+"/service_bindings/"+newID(), bindBody(planRO, nil)), http.StatusCreated, "bind").creds()
	if c["access"] != "read-only" {
		t.Errorf("access = %v, want read-only", c["access"])
	}
	if err := canWrite(c["access_key_id"].(string), c["secret_access_key"].(string), c["bucket"].(string)); err == nil {
		t.Error("a read-only key could write")
	}
}

// TestConcurrentBindStorm: many identical binds at once give one key, one
// 201, the same credentials in every answer, and the credentials work in
// their bucket and nowhere else.
func TestConcurrentBindStorm(t *testing.T) {
	h := newHarness(t)
	inst := h.provisioned(planStd)
	other := h.provisioned(planStd)
	const n = 200
	bid := newID()
	b := inst + "/service_bindings/" + bid
	replies := make([]reply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i] = h.do("PUT", b, bindBody(planStd, nil))
		}()
	}
	wg.Wait()
	created := 0
	first := replies[0].creds()
	for i, r := range replies {
		switch r.code {
		case http.StatusCreated:
			created++
		case http.StatusOK:
		default:
			t.Fatalf("reply %d: %d %v", i, r.code, r.body)
		}
		if r.creds()["access_key_id"] != first["access_key_id"] || r.creds()["secret_access_key"] != first["secret_access_key"] {
			t.Fatalf("reply %d carries other credentials", i)
		}
	}
	if created != 1 {
		t.Errorf("201 answers = %d, want 1", created)
	}
	users := h.users()
	if keys := users[driver.UserName(h.prefix, "binding", bid)]; len(keys) != 1 || keys[0] != first["access_key_id"] {
		t.Errorf("live keys = %v, want exactly [%v]", keys, first["access_key_id"])
	}
	ak, sk := first["access_key_id"].(string), first["secret_access_key"].(string)
	if err := canWrite(ak, sk, first["bucket"].(string)); err != nil {
		t.Errorf("the key cannot use its bucket: %v", err)
	}
	h.want(h.do("GET", other, nil), http.StatusOK, "the other instance")
	for _, name := range h.buckets() {
		if name == first["bucket"] {
			continue
		}
		if err := canWrite(ak, sk, name); err == nil {
			t.Errorf("the key can write to another instance's bucket %s", name)
		}
	}
}

// TestLostKeyIsDeleted simulates a crash after the backend created a key
// and before the broker recorded it: the retry must delete that key and
// record a fresh one before any answer carries credentials.
func TestLostKeyIsDeleted(t *testing.T) {
	h := newHarness(t)
	inst := h.provisioned(planStd)
	bid := newID()
	user := driver.UserName(h.prefix, "binding", bid)
	var lost []string
	var once sync.Once
	h.drv.hook("EnsureCredential", nil)
	h.drv.Driver = &loseFirstKey{Driver: h.drv.Driver, lost: func(id string) { once.Do(func() { lost = append(lost, id) }) }}
	r := h.want(h.do("PUT", inst+"/service_bindings/"+bid, bindBody(planStd, nil)), http.StatusCreated, "bind")
	if len(lost) != 1 {
		t.Fatalf("the lost-key hook did not run")
	}
	keys := h.users()[user]
	if len(keys) != 1 || keys[0] != r.creds()["access_key_id"] || keys[0] == lost[0] {
		t.Errorf("live keys = %v, answered %v, lost %v: want only the answered key", keys, r.creds()["access_key_id"], lost[0])
	}
}

// TestNewUserBindIsOneKeyCall: a bind whose key call created the user
// (driver.Credential.NewUser) records the key in the write that ends the
// operation and makes no second call to delete the user's other keys (it
// has none made before its own): one key call, and the binding's record
// written twice (the intent, then the key with the end). The answered key
// is the user's only one and works.
func TestNewUserBindIsOneKeyCall(t *testing.T) {
	h := newHarness(t)
	inst := h.provisioned(planStd)
	bid := newID()
	before := h.drv.count("EnsureCredential")
	r := h.want(h.do("PUT", inst+"/service_bindings/"+bid, bindBody(planStd, nil)), http.StatusCreated, "bind")
	if n := h.drv.count("EnsureCredential") - before; n != 1 {
		t.Errorf("%d key calls for a bind that created its user, want 1", n)
	}
	rec, err := h.store.Get(context.Background(), engine.KindBinding, bid)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Version != 2 {
		t.Errorf("binding record written %d times, want 2 (the intent; the key with the operation's end)", rec.Version)
	}
	cr := r.creds()
	ak, _ := cr["access_key_id"].(string)
	if keys := h.users()[driver.UserName(h.prefix, "binding", bid)]; len(keys) != 1 || keys[0] != ak {
		t.Errorf("live keys = %v, answered %s: want only the answered key", keys, ak)
	}
	if err := canWrite(ak, cr["secret_access_key"].(string), cr["bucket"].(string)); err != nil {
		t.Errorf("the answered credentials do not work: %v", err)
	}
}

// loseFirstKey lets the first EnsureCredential create its key, then
// reports a failure, as if the answer was lost in a crash.
type loseFirstKey struct {
	driver.Driver
	mu   sync.Mutex
	done bool
	lost func(string)
}

func (l *loseFirstKey) EnsureCredential(ctx context.Context, s driver.CredentialSpec) (driver.Credential, error) {
	c, err := l.Driver.EnsureCredential(ctx, s)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && !l.done {
		l.done = true
		l.lost(c.AccessKeyID)
		return driver.Credential{}, errors.New("injected: connection reset after the key was created")
	}
	return c, err
}

func TestDeprovisionRevokesBindings(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	inst := h.provisioned(planStd)
	var creds []map[string]any
	for range 3 {
		creds = append(creds, h.want(h.do("PUT", inst+"/service_bindings/"+newID(), bindBody(planStd, nil)), http.StatusCreated, "bind").creds())
	}
	if n := len(h.users()); n != 3 {
		t.Fatalf("users = %d, want 3", n)
	}
	c := creds[0]
	bucket := c["bucket"].(string)
	if err := canWrite(c["access_key_id"].(string), c["secret_access_key"].(string), bucket); err != nil {
		t.Fatal(err)
	}

	// The standard plan refuses to delete a non-empty bucket; the bindings
	// are revoked all the same.
	r := h.do("DELETE", del(inst, planStd, false), nil)
	if d := r.str("description"); r.code != http.StatusInternalServerError || !strings.Contains(d, "not empty") ||
		!strings.Contains(d, "probe") || !strings.Contains(d, "purge_on_delete") {
		t.Fatalf("delete of a non-empty bucket: %d %v, want 500 saying it is not empty, what it holds (the object probe) and what to do", r.code, r.body)
	}
	if b := h.buckets(); len(b) != 1 {
		t.Fatalf("buckets = %v: the non-empty bucket must stay", b)
	}
	if u := h.users(); len(u) != 0 {
		t.Errorf("users after deprovision = %v, want none", u)
	}
	for _, c := range creds {
		if err := canWrite(c["access_key_id"].(string), c["secret_access_key"].(string), bucket); err == nil {
			t.Error("a binding's key still works after deprovision")
		}
	}
	h.want(h.do("PATCH", inst, map[string]any{"service_id": serviceID, "parameters": map[string]any{"purge_on_delete": true}}),
		http.StatusUnprocessableEntity, "update of a failed instance")

	// Emptied by its owner, the bucket deletes on the next try.
	if _, err := h.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String("probe")}); err != nil {
		t.Fatal(err)
	}
	h.want(h.do("DELETE", del(inst, planStd, false), nil), http.StatusOK, "delete after emptying")
	if b := h.buckets(); len(b) != 0 {
		t.Fatalf("buckets = %v, want none", b)
	}

	// With purge_on_delete the objects go with the bucket.
	inst2 := instancePth + newID()
	h.want(h.do("PUT", inst2, provisionBody(planStd, map[string]any{"purge_on_delete": true})), http.StatusCreated, "purging instance")
	c2 := h.want(h.do("PUT", inst2+"/service_bindings/"+newID(), bindBody(planStd, nil)), http.StatusCreated, "bind").creds()
	if err := canWrite(c2["access_key_id"].(string), c2["secret_access_key"].(string), c2["bucket"].(string)); err != nil {
		t.Fatal(err)
	}
	d := h.want(h.do("DELETE", del(inst2, planStd, true), nil), http.StatusAccepted, "async delete with bindings")
	if s := h.waitOp(inst2, d.str("operation")); s != "succeeded" {
		t.Fatalf("deprovision ended %q", s)
	}
	if b, u := h.buckets(), h.users(); len(b) != 0 || len(u) != 0 {
		t.Errorf("left after deprovision: buckets %v, users %v", b, u)
	}
}

// TestBindDuringPlanChange: a read-write bind that arrives while the
// instance is changing to a plan without read-write bindings is refused,
// so the change can never leave a binding its new plan forbids.
func TestBindDuringPlanChange(t *testing.T) {
	h := newHarness(t)
	inst := h.provisioned(planStd)
	g := newGate()
	h.drv.hook("EnsureBucket", g.hold)
	op := h.want(h.do("PATCH", async(inst), map[string]any{"service_id": serviceID, "plan_id": planRO}), http.StatusAccepted, "plan change").str("operation")
	g.waitEntered(t)
	r := h.want(h.do("PUT", inst+"/service_bindings/"+newID(), bindBody(planStd, nil)), http.StatusUnprocessableEntity, "rw bind during the change")
	if !strings.Contains(r.str("description"), "does not allow read-write") {
		t.Errorf("description = %q, want it to say why", r.str("description"))
	}
	h.want(h.do("PUT", inst+"/service_bindings/"+newID(), bindBody(planStd, map[string]any{"access": "read-only"})), http.StatusCreated, "ro bind during the change")
	h.drv.hook("EnsureBucket", nil)
	g.release()
	if s := h.waitOp(inst, op); s != "succeeded" {
		t.Fatalf("plan change ended %q", s)
	}
	if n := len(h.users()); n != 1 {
		t.Errorf("users = %d, want only the read-only binding's", n)
	}
}
