package objectbucket

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The two sets below are expectations in the sense of Kubernetes' own
// controllers (the ReplicaSet controller's ControllerExpectations): what
// this process knows it has written and its cache may not show yet. They
// live in memory only. A new process starts with a cache listed after every
// earlier write, so it has nothing to expect.

// finalizedSet holds the claims whose finalizer this process removed. A
// claim whose finalizer is removed is gone or going; an entry only stops
// passes that would find nothing to do once the cache caught up.
type finalizedSet struct {
	mu   sync.Mutex
	uids map[types.UID]time.Time
}

// finalizedTTL is longer than any cache lag worth waiting for.
const finalizedTTL = time.Minute

func (f *finalizedSet) done(uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if f.uids == nil {
		f.uids = map[types.UID]time.Time{}
	}
	for u, at := range f.uids {
		if now.Sub(at) > finalizedTTL {
			delete(f.uids, u)
		}
	}
	f.uids[uid] = now
}

func (f *finalizedSet) has(uid types.UID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.uids[uid]
	return ok
}

// writeSet holds, per claim, the objects this process created or changed
// while provisioning it. A pass that read a cache behind those writes would
// redo them: patch the status and record the event again, call the backend
// for an ObjectBucket it sees unbound, or take the claim's own Secret for a
// missing one and make a key for it. Such a pass is skipped instead
// (behind), and the watch event of the write brings the next one.
//
// A created object is behind while the cache does not hold it; a changed
// one while the cache shows a resourceVersion this process wrote over.
// Resource versions are only compared for equality, as the API asks.
type writeSet struct {
	mu     sync.Mutex
	claims map[types.UID]*claimWrites
	swept  time.Time
}

// writesTTL bounds how long a pass waits for the cache. Past it, the pass
// runs on whatever the cache holds, which is safe, only wasteful: an object
// of ours deleted right after its creation, or a Secret whose label a user
// removed, never shows up in the cache.
const writesTTL = 15 * time.Second

type claimWrites struct {
	at   time.Time
	objs map[writeKey]*objWrites
}

type writeKey struct {
	kind string
	key  types.NamespacedName
}

type objWrites struct {
	obj     client.Object // an empty object of the written kind, to read into
	created bool
	before  map[string]struct{}
}

func (w *writeSet) entry(uid types.UID, obj client.Object) *objWrites {
	if w.claims == nil {
		w.claims = map[types.UID]*claimWrites{}
	}
	cw := w.claims[uid]
	if cw == nil {
		cw = &claimWrites{objs: map[writeKey]*objWrites{}}
		w.claims[uid] = cw
	}
	cw.at = time.Now()
	k := writeKey{fmt.Sprintf("%T", obj), client.ObjectKeyFromObject(obj)}
	ow := cw.objs[k]
	if ow == nil {
		ow = &objWrites{obj: reflect.New(reflect.TypeOf(obj).Elem()).Interface().(client.Object), before: map[string]struct{}{}}
		cw.objs[k] = ow
	}
	return ow
}

// created records that obj was created for the claim uid.
func (w *writeSet) created(uid types.UID, obj client.Object) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.entry(uid, obj).created = true
}

// changed records that obj, read at resourceVersion before, was written.
func (w *writeSet) changed(uid types.UID, obj client.Object, before string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.entry(uid, obj).before[before] = struct{}{}
}

// behind reports whether the cache (c) is behind a write this process made
// for claim, and how long to wait for it at most. Entries the cache has
// caught up with, or that outlived writesTTL, are dropped.
func (w *writeSet) behind(ctx context.Context, c client.Reader, claim client.Object) (bool, time.Duration, error) {
	w.mu.Lock()
	w.sweep()
	cw := w.claims[claim.GetUID()]
	var objs map[writeKey]*objWrites
	var at time.Time
	if cw != nil {
		at = cw.at
		objs = make(map[writeKey]*objWrites, len(cw.objs))
		for k, ow := range cw.objs {
			objs[k] = ow
		}
	}
	w.mu.Unlock()
	if len(objs) == 0 || time.Since(at) > writesTTL {
		return false, 0, nil
	}
	for k, ow := range objs {
		seen, rv := true, claim.GetResourceVersion()
		if k.key != client.ObjectKeyFromObject(claim) || reflect.TypeOf(ow.obj) != reflect.TypeOf(claim) {
			probe := ow.obj.DeepCopyObject().(client.Object)
			err := c.Get(ctx, k.key, probe)
			switch {
			case apierrors.IsNotFound(err):
				seen = false
			case err != nil:
				return false, 0, fmt.Errorf("read %s from the cache: %w", k.key, err)
			}
			rv = probe.GetResourceVersion()
		}
		_, overwritten := ow.before[rv]
		if (ow.created && !seen) || (seen && overwritten) {
			return true, max(writesTTL-time.Since(at), time.Millisecond), nil
		}
	}
	w.mu.Lock()
	if w.claims[claim.GetUID()] == cw && cw.at.Equal(at) {
		delete(w.claims, claim.GetUID())
	}
	w.mu.Unlock()
	return false, 0, nil
}

// sweep drops the entries of claims not written for writesTTL, at most once
// a second. w.mu is held.
func (w *writeSet) sweep() {
	now := time.Now()
	if now.Sub(w.swept) < time.Second {
		return
	}
	w.swept = now
	for uid, cw := range w.claims {
		if now.Sub(cw.at) > writesTTL {
			delete(w.claims, uid)
		}
	}
}
