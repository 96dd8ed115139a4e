package engine_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"
)

// TestReplicasShareWorkByLease runs two engines (replicas) on one store:
// while one drives an operation the other never repeats its steps, a sync
// duplicate on the other waits for the result, and when the driving replica
// dies its work is taken over once the lease expires.
func TestReplicasShareWorkByLease(t *testing.T) {
	const ttl = 600 * time.Millisecond
	a := newHarness(t, harnessOpts{replica: "a", leaseTTL: ttl})
	b := newHarness(t, harnessOpts{peer: a, replica: "b", leaseTTL: ttl})

	g := newGate()
	a.drv.hook("EnsureBucket", g.hold)
	id := instancePth + newID()
	op := a.want(a.do("PUT", async(id), provisionBody(planStd, nil)), http.StatusAccepted, "provision on a").str("operation")
	g.waitEntered(t)

	// b sees the same operation, and does not drive it while a's lease
	// lives (a renews it: it is still in its step).
	if again := b.want(b.do("PUT", async(id), provisionBody(planStd, nil)), http.StatusAccepted, "duplicate on b"); again.str("operation") != op {
		t.Errorf("b answered operation %q, want %q", again.str("operation"), op)
	}
	time.Sleep(ttl / 2)
	if n := b.drv.count("EnsureBucket"); n != 0 {
		t.Fatalf("b called EnsureBucket %d times while a held the lease", n)
	}

	// A sync duplicate on b waits for a's result.
	done := make(chan reply)
	go func() { done <- b.do("PUT", id, provisionBody(planStd, nil)) }()
	time.Sleep(50 * time.Millisecond)
	g.release()
	b.want(<-done, http.StatusOK, "sync duplicate on b")
	if n := b.drv.count("EnsureBucket"); n != 0 {
		t.Errorf("b called EnsureBucket %d times; the work was a's", n)
	}

	// a dies in the middle of a bind; b takes over after the lease expires.
	g2 := newGate()
	a.drv.hook("EnsureCredential", g2.hold)
	bind := id + "/service_bindings/" + newID()
	bop := a.want(a.do("PUT", async(bind), bindBody(planStd, nil)), http.StatusAccepted, "bind on a").str("operation")
	g2.waitEntered(t)
	// a dies: its shutdown gives up on the call in flight (as a crash
	// would), and its lease stays behind.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := a.eng.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown with a call held = %v, want the deadline to cut it", err)
	}
	start := time.Now()
	if s := b.waitOp(bind, bop); s != "succeeded" {
		t.Fatalf("bind after takeover ended %q", s)
	}
	if took := time.Since(start); took > 10*ttl {
		t.Errorf("takeover took %v, want about the lease TTL %v", took, ttl)
	}
	if n := b.drv.count("EnsureCredential"); n == 0 {
		t.Error("b never drove the bind")
	}
	c := b.want(b.do("PUT", bind, bindBody(planStd, nil)), http.StatusOK, "bind again on b").creds()
	if err := canWrite(c["access_key_id"].(string), c["secret_access_key"].(string), c["bucket"].(string)); err != nil {
		t.Errorf("credentials after takeover do not work: %v", err)
	}
	if keys := b.users(); len(keys) != 1 {
		t.Errorf("users = %v, want one", keys)
	}
}
