package engine_test

import (
	"context"
	"database/sql"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/store"
)

// spoil rewrites a record in the SQLite state file behind the stores' back,
// as a write outside bucketbroker could: a field nested as deep as
// encoding/json allows, which makes the whole record unreadable, and an
// operation in progress, so that start-up and the sweep list it.
func spoil(t *testing.T, statePath string, kind engine.Kind, id string) {
	t.Helper()
	nest(t, statePath, kind, id, 9999, true)
}

// nest rewrites a record as spoil does, with a field nested depth levels
// deep, its operation in progress or left as it was.
func nest(t *testing.T, statePath string, kind engine.Kind, id string, depth int, inProgress bool) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+statePath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var data string
	if err := db.QueryRow(`SELECT data FROM records WHERE kind = ? AND id = ?`, kind, id).Scan(&data); err != nil {
		t.Fatalf("read %s/%s: %v", kind, id, err)
	}
	deep := strings.Repeat(`{"a":`, depth) + `{}` + strings.Repeat(`}`, depth)
	data = strings.Replace(data, `"fingerprint":`, `"x":`+deep+`,"fingerprint":`, 1)
	set := `UPDATE records SET data = ? WHERE kind = ? AND id = ?`
	if inProgress {
		set = `UPDATE records SET data = ?, op_state = 'in progress' WHERE kind = ? AND id = ?`
	}
	if _, err := db.Exec(set, data, kind, id); err != nil {
		t.Fatalf("spoil %s/%s: %v", kind, id, err)
	}
}

// TestUnreadableRecordIsolated: one record that cannot be decoded does not
// take the broker down. Start-up and the sweep skip it (rather than fail
// with "list unfinished operations: ... exceeded max depth" on every
// start), every other record's operations go on, and a deprovision whose
// instance has such a binding waits for it rather than delete the bucket
// past a credential nobody can revoke, and says how to repair it. After
// the operator's repair the deprovision revokes the binding and deletes the
// bucket as usual.
func TestUnreadableRecordIsolated(t *testing.T) {
	a := newHarness(t)
	inst := instancePth + newID()
	a.want(a.do("PUT", inst, provisionBody(planStd, nil)), http.StatusCreated, "provision")
	bindingID := newID()
	a.want(a.do("PUT", inst+"/service_bindings/"+bindingID, bindBody(planStd, nil)), http.StatusCreated, "bind")
	other := instancePth + newID()
	a.want(a.do("PUT", other, provisionBody(planStd, nil)), http.StatusCreated, "provision another")

	spoil(t, a.statePath, engine.KindBinding, bindingID)

	// A second process on the same state: it starts, whatever it lists.
	b := newHarness(t, harnessOpts{peer: a, replica: "b", asyncTimeout: 2 * time.Second})
	rep, ok := b.store.(engine.UnreadableReporter)
	if !ok {
		t.Fatalf("%T does not report unreadable records", b.store)
	}
	if u := rep.Unreadable(); len(u) != 1 || u[0].ID != bindingID {
		t.Errorf("Unreadable() after start-up = %+v, want the spoiled binding", u)
	}

	// Everything else works.
	ob := other + "/service_bindings/" + newID()
	b.want(b.do("PUT", ob, bindBody(planStd, nil)), http.StatusCreated, "bind to another instance")
	b.want(b.do("DELETE", del(ob, planStd, false), nil), http.StatusOK, "unbind from it")
	b.want(b.do("DELETE", del(other, planStd, false), nil), http.StatusOK, "deprovision it")

	// A plan change the unreadable binding might forbid is refused.
	if r := b.do("PATCH", inst, map[string]any{"service_id": serviceID, "plan_id": planRO}); r.code != http.StatusUnprocessableEntity ||
		!strings.Contains(r.str("description"), bindingID) {
		t.Errorf("plan change past an unreadable binding: %d %v, want 422 naming it", r.code, r.body)
	}

	// The instance of the unreadable binding: its deprovision fails at
	// its deadline, naming the binding, and leaves the bucket.
	r := b.want(b.do("DELETE", del(inst, planStd, true), nil), http.StatusAccepted, "deprovision async")
	if st := b.waitOp(inst, r.str("operation")); st != "failed" {
		t.Fatalf("deprovision = %s, want failed", st)
	}
	lo := b.do("GET", inst+"/last_operation?operation="+r.str("operation"), nil)
	if d := lo.str("description"); !strings.Contains(d, bindingID) || !strings.Contains(d, "admin records repair") {
		t.Errorf("description = %q, want the binding and how to repair it", d)
	}
	if n := len(b.buckets()); n != 1 {
		t.Errorf("%d buckets after the failed deprovision, want the instance's", n)
	}

	raw, ok := b.store.(store.RawStore)
	if !ok {
		t.Fatalf("%T is not a RawStore", b.store)
	}
	if _, err := store.Repair(context.Background(), raw, engine.KindBinding, bindingID); err != nil {
		t.Fatalf("repair: %v", err)
	}
	r = b.want(b.do("DELETE", del(inst, planStd, true), nil), http.StatusAccepted, "deprovision again")
	if st := b.waitOp(inst, r.str("operation")); st != "succeeded" {
		t.Fatalf("deprovision after the repair = %s, want succeeded", st)
	}
	if n := len(b.buckets()); n != 0 {
		t.Errorf("%d buckets after the deprovision, want none", n)
	}
	if u := b.users(); len(u) != 0 {
		t.Errorf("users after the deprovision: %v, want none (the repaired binding revoked)", u)
	}
}

// TestDeepRecordIsRepairable: a stored record nested deeper than the store
// writes but within what encoding/json reads would be readable yet
// refused by every write (its DELETE 503 for ever) if reads did not apply
// the writes' bounds. They do: it is reported, the repair prunes it, and
// the instance deprovisions.
func TestDeepRecordIsRepairable(t *testing.T) {
	ctx := context.Background()
	a := newHarness(t)
	inst := instancePth + newID()
	a.want(a.do("PUT", inst, provisionBody(planStd, nil)), http.StatusCreated, "provision")
	id := inst[strings.LastIndex(inst, "/")+1:]
	nest(t, a.statePath, engine.KindInstance, id, 100, false)

	raw := a.store.(store.RawStore)
	found, err := store.FindUnreadable(ctx, raw)
	if err != nil || len(found) != 1 || found[0].ID != id {
		t.Fatalf("FindUnreadable = %+v, %v; want the instance %s nested 100 levels deep", found, err, id)
	}
	if rep, err := store.Repair(ctx, raw, engine.KindInstance, id); err != nil || rep.Pruned != 1 {
		t.Fatalf("Repair = %+v, %v; want one value pruned", rep, err)
	}
	a.want(a.do("DELETE", del(inst, planStd, false), nil), http.StatusOK, "deprovision after the repair")
	if b := a.buckets(); len(b) != 0 {
		t.Errorf("buckets after the deprovision: %v, want none", b)
	}
}
