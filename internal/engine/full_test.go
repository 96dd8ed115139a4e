package engine_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/store"
)

// fullStore fails every Update for want of space while full is set, as a
// store on a full disk does once an insert has taken the last room of its
// pages.
type fullStore struct {
	testStore
	full *atomic.Bool
}

func (s fullStore) Update(ctx context.Context, r *engine.Record) error {
	if s.full.Load() {
		return store.Full(errors.New("database or disk is full (13)"))
	}
	return s.testStore.Update(ctx, r)
}

// TestWorkerCannotWrite: a synchronous provision whose record is inserted,
// but whose worker cannot write it (its lease, its progress) for want of
// space, is answered 503 naming the full store as soon as the worker
// fails, not 500 "still in progress" when the wait runs out. The worker
// goes on retrying: once the store can write again, the operation
// finishes, and the platform's retry gets the instance.
func TestWorkerCannotWrite(t *testing.T) {
	var full atomic.Bool
	h := newHarness(t, harnessOpts{syncTimeout: time.Minute,
		wrap: func(s testStore) testStore { return fullStore{testStore: s, full: &full} }})
	id := instancePth + newID()
	full.Store(true)
	r := h.do("PUT", id, provisionBody(planStd, nil))
	if r.code != http.StatusServiceUnavailable || !strings.Contains(r.str("description"), "disk is full") {
		t.Errorf("provision whose worker cannot write: %d %v, want 503 saying the disk is full", r.code, r.body)
	}
	full.Store(false)
	deadline := time.Now().Add(time.Minute)
	for r = h.do("PUT", id, provisionBody(planStd, nil)); r.code != http.StatusCreated && r.code != http.StatusOK; r = h.do("PUT", id, provisionBody(planStd, nil)) {
		if time.Now().After(deadline) {
			t.Fatalf("provision after the store can write again: %d %v", r.code, r.body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.want(h.do("PUT", id, provisionBody(planStd, nil)), http.StatusOK, "provision again")
	if b := h.buckets(); len(b) != 1 {
		t.Errorf("buckets = %v, want one", b)
	}
}
