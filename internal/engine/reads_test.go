package engine_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/engine"
)

// maxProvisionBindReads is the most record reads (Store.Get) a new
// provision plus bind may make on one engine, synchronous or answered
// within the sync budget: the provision's look for the id and its look
// again in its turn to insert (create.go), the same two for the binding,
// the bind's two looks at the instance (before and after the binding is
// recorded, bindings.go). Neither worker reads the record its own write
// finished (drive), and neither waiting request reads the record its
// worker's write handed it (wait).
const maxProvisionBindReads = 6

// maxUnbindDeprovisionReads is the same for the unbind and the deprovision
// that follow: each request's look at its record. Their workers start with
// the record the request wrote and do not read it back after their own
// final write, and no waiting request reads it.
const maxUnbindDeprovisionReads = 2

// TestProvisionBindReads counts the record reads of provisions plus
// binds, and of their unbinds and deprovisions, on one engine. Waiting requests are woken by writes only (their
// poll of the store, for other processes' writes, is set past the test),
// so that the count does not depend on how fast the backend answers.
func TestProvisionBindReads(t *testing.T) {
	for _, mode := range []string{"sync", "accepts_incomplete"} {
		t.Run(mode, func(t *testing.T) {
			var reads atomic.Int64
			h := newHarness(t, harnessOpts{syncBudget: 5 * time.Second, reads: &reads})
			engine.SetWaitPoll(h.eng, time.Hour)
			q := func(p string) string { return p }
			if mode != "sync" {
				q = async
			}
			// A worker ends a little after the write that answered its
			// request: a request that comes first (the next one in the
			// test) makes it pass again, and that pass reads. Each count
			// starts once the workers of the last one have ended.
			idle := func() {
				t.Helper()
				if !engine.WaitIdle(h.eng, 10*time.Second) {
					t.Fatal("workers still running 10s after their requests were answered")
				}
				reads.Store(0)
			}
			for i := range 5 {
				idle()
				id := instancePth + newID()
				h.want(h.do("PUT", q(id), provisionBody(planStd, nil)), http.StatusCreated, "provision")
				bind := id + "/service_bindings/" + newID()
				if r := h.want(h.do("PUT", q(bind), bindBody(planStd, nil)), http.StatusCreated, "bind"); r.creds() == nil {
					t.Fatalf("bind %d answered no credentials: %v", i, r.body)
				}
				if n := reads.Load(); n > maxProvisionBindReads {
					t.Errorf("provision + bind %d made %d record reads, want at most %d", i, n, maxProvisionBindReads)
				}
				idle()
				h.want(h.do("DELETE", del(bind, planStd, false), nil), http.StatusOK, "unbind")
				h.want(h.do("DELETE", del(id, planStd, false), nil), http.StatusOK, "deprovision")
				if n := reads.Load(); n > maxUnbindDeprovisionReads {
					t.Errorf("unbind + deprovision %d made %d record reads, want at most %d", i, n, maxUnbindDeprovisionReads)
				}
			}
		})
	}
}

// TestHandOverIsTheStoredRecord: the record a write hands to a waiting
// request is the one a read of the store returns at that version, field
// for field, for an instance and for a binding with its sealed secret,
// on both stores.
func TestHandOverIsTheStoredRecord(t *testing.T) { testHandOver(t, newHarness(t)) }

// TestHandOverIsTheStoredRecordPostgres is the same with the state in
// PostgreSQL.
func TestHandOverIsTheStoredRecordPostgres(t *testing.T) {
	testHandOver(t, newHarness(t, harnessOpts{postgres: true}))
}

func testHandOver(t *testing.T, h *harness) {
	ctx := context.Background()
	inst := newID()
	h.want(h.do("PUT", instancePth+inst, provisionBody(planStd, map[string]any{"labels": map[string]any{"team": "a+b=c"}})), http.StatusCreated, "provision")
	bind := newID()
	h.want(h.do("PUT", instancePth+inst+"/service_bindings/"+bind, bindBody(planStd, nil)), http.StatusCreated, "bind")
	for _, k := range []struct {
		kind engine.Kind
		id   string
	}{{engine.KindInstance, inst}, {engine.KindBinding, bind}} {
		rec, err := h.store.Get(ctx, k.kind, k.id)
		if err != nil {
			t.Fatal(err)
		}
		rec.Op.Description = "changed"
		handed, err := engine.SaveHandedOver(ctx, h.eng, rec)
		if err != nil {
			t.Fatal(err)
		}
		stored, err := h.store.Get(ctx, k.kind, k.id)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(stored, handed); diff != "" {
			t.Errorf("%s: the record handed over differs from the stored one (-stored +handed):\n%s", k.kind, diff)
		}
	}
}

// TestLateNotifyIsReadAgain: a waiting request is handed only a record
// newer than what it has seen. A write of this process that notifies late
// (after the request wrote the operation it waits for) hands an older
// version, here the finished operation before it: the wait reads the
// store instead, sees its operation in progress, and answers from the
// write that ends it. (Taken as it was, the late record would answer that
// the operation was superseded.) Of two writes that notify out of order,
// the newer is handed over.
func TestLateNotifyIsReadAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var reads atomic.Int64
	h := newHarness(t, harnessOpts{reads: &reads})
	engine.SetWaitPoll(h.eng, time.Hour)
	id := newID()
	h.want(h.do("PUT", instancePth+id, provisionBody(planStd, nil)), http.StatusCreated, "provision")
	done, err := h.store.Get(ctx, engine.KindInstance, id)
	if err != nil {
		t.Fatal(err)
	}
	// An operation that another replica drives (its lease, far off), so
	// that this engine's sweep leaves it alone.
	running := done.Clone()
	running.Op = engine.Operation{ID: "op-" + newID(), Type: engine.OpUpdate, State: engine.OpInProgress,
		StartedAt: time.Now().UTC(), Deadline: time.Now().UTC().Add(time.Hour)}
	running.Phase, running.Lease, running.LeaseUntil = engine.PhaseUpdating, "other", time.Now().UTC().Add(time.Hour)
	if err := h.store.Update(ctx, running); err != nil {
		t.Fatal(err)
	}
	finished := func(r *engine.Record) *engine.Record {
		f := r.Clone()
		f.Op.State, f.Op.EndedAt, f.Phase, f.Lease, f.LeaseUntil = engine.OpSucceeded, time.Now().UTC(), engine.PhaseReady, "", time.Time{}
		if err := h.store.Update(ctx, f); err != nil {
			t.Fatal(err)
		}
		return f
	}

	t.Run("late", func(t *testing.T) {
		wait := engine.StartWait(h.eng, running)
		engine.Notify(h.eng, done) // the write before, notified late
		reads.Store(0)
		answer := make(chan *engine.Record, 1)
		go func() {
			r, err := wait(ctx)
			if err != nil {
				t.Error(err)
			}
			answer <- r
		}()
		// The wait reads the store, then waits for a write.
		for reads.Load() == 0 {
			select {
			case r := <-answer:
				t.Fatalf("the wait answered from the late record without a read: operation %s %s", r.Op.ID, r.Op.State)
			case <-ctx.Done():
				t.Fatal("the wait never looked")
			case <-time.After(time.Millisecond):
			}
		}
		select {
		case r := <-answer:
			t.Fatalf("the wait answered before the operation ended: operation %s %s", r.Op.ID, r.Op.State)
		default:
		}
		engine.Notify(h.eng, finished(running))
		r := <-answer
		if r == nil || r.Op.ID != running.Op.ID || r.Op.State != engine.OpSucceeded {
			t.Fatalf("the wait answered %+v, want operation %s succeeded", r, running.Op.ID)
		}
	})

	t.Run("out of order", func(t *testing.T) {
		again, err := h.store.Get(ctx, engine.KindInstance, id)
		if err != nil {
			t.Fatal(err)
		}
		again.Op = running.Op
		again.Op.ID = "op-" + newID()
		again.Phase, again.Lease, again.LeaseUntil = engine.PhaseUpdating, "other", time.Now().UTC().Add(time.Hour)
		if err := h.store.Update(ctx, again); err != nil {
			t.Fatal(err)
		}
		wait := engine.StartWait(h.eng, again)
		end := finished(again)
		engine.Notify(h.eng, end)
		engine.Notify(h.eng, again) // the older write, notified after
		reads.Store(0)
		r, err := wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if r.Op.ID != again.Op.ID || r.Op.State != engine.OpSucceeded || r.Version != end.Version {
			t.Fatalf("the wait answered operation %s %s at version %d, want %s succeeded at %d", r.Op.ID, r.Op.State, r.Version, again.Op.ID, end.Version)
		}
		if n := reads.Load(); n != 0 {
			t.Errorf("the wait read the store %d times, want 0: the newer write was handed over", n)
		}
	})
}

// TestReplicasAnswerAroundHandOvers runs two engines on one store, each
// answering requests for records the other writes, with leases long
// enough that no sweep steps in: a duplicate waiting on one replica while
// the other drives the bind answers with the credentials the driver
// recorded, and the replica that did not drive it makes no backend call;
// a bind waiting on one replica while the other unbinds it is answered as
// superseded, its worker's next write is refused (compare-and-swap), and
// the unbind ends with nothing left under the binding's name.
func TestReplicasAnswerAroundHandOvers(t *testing.T) {
	const ttl = time.Hour
	a := newHarness(t, harnessOpts{replica: "a", leaseTTL: ttl})
	b := newHarness(t, harnessOpts{peer: a, replica: "b", leaseTTL: ttl})
	id := a.provisioned(planStd)

	// b drives a bind; a sync duplicate on a waits for it.
	g := newGate()
	b.drv.hook("EnsureCredential", g.hold)
	bind := id + "/service_bindings/" + newID()
	op := b.want(b.do("PUT", async(bind), bindBody(planStd, nil)), http.StatusAccepted, "bind on b").str("operation")
	g.waitEntered(t)
	dup := make(chan reply, 1)
	go func() { dup <- a.doQuiet("PUT", bind, bindBody(planStd, nil)) }()
	waitFor(t, "the duplicate on a to wait", func() bool { return engine.Waiting(a.eng) == 1 })
	g.release()
	if s := b.waitOp(bind, op); s != "succeeded" {
		t.Fatalf("bind on b ended %q", s)
	}
	got := a.want(<-dup, http.StatusOK, "duplicate on a").creds()
	want := b.want(b.do("PUT", bind, bindBody(planStd, nil)), http.StatusOK, "replay on b").creds()
	if got["access_key_id"] != want["access_key_id"] || got["secret_access_key"] != want["secret_access_key"] {
		t.Errorf("a answered key %v, b's record holds %v", got["access_key_id"], want["access_key_id"])
	}
	if n := a.drv.count("EnsureCredential"); n != 0 {
		t.Errorf("a called EnsureCredential %d times; the bind was b's", n)
	}

	// a drives a bind; b unbinds it meanwhile (a's lease stays: a drives
	// the unbind, after its bind's next write is refused).
	g2 := newGate()
	a.drv.hook("EnsureCredential", g2.hold)
	bind2 := id + "/service_bindings/" + newID()
	bound := make(chan reply, 1)
	go func() { bound <- a.doQuiet("PUT", bind2, bindBody(planStd, nil)) }()
	g2.waitEntered(t)
	unbound := make(chan reply, 1)
	go func() { unbound <- b.doQuiet("DELETE", del(bind2, planStd, false), nil) }()
	if r := <-bound; r.code != http.StatusUnprocessableEntity {
		t.Errorf("bind on a while b unbound it: %d %v, want 422 (superseded)", r.code, r.body)
	}
	g2.release()
	b.want(<-unbound, http.StatusOK, "unbind on b")
	if users := a.users(); len(users) != 1 {
		t.Errorf("users = %v, want only the first binding's", users)
	}
}
