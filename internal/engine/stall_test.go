package engine_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	iamtypes "github.com/aws/aws-sdk-go-v2/service/iam/types"

	"github.com/bucketbroker/bucketbroker/internal/driver/s3iam"
	"github.com/bucketbroker/bucketbroker/internal/engine"
)

// TestStalledCallKeepsLease stalls the backend under a bind for three
// lease TTLs on one of three replicas sharing a PostgreSQL store. The
// holder renews its lease while its call hangs, so neither other replica
// takes the bind over: the one key the bind makes is the one it answers.
// (A lease renewed only between steps would let both replicas drive the
// bind.)
func TestStalledCallKeepsLease(t *testing.T) {
	const ttl = 2 * time.Second
	a := newHarness(t, harnessOpts{postgres: true, replica: "a", leaseTTL: ttl})
	b := newHarness(t, harnessOpts{postgres: true, peer: a, replica: "b", leaseTTL: ttl})
	c := newHarness(t, harnessOpts{postgres: true, peer: a, replica: "c", leaseTTL: ttl})

	id := instancePth + newID()
	a.want(a.do("PUT", id, provisionBody(planStd, nil)), http.StatusCreated, "provision")
	g := newGate()
	a.drv.hook("EnsureCredential", g.hold)
	bind := id + "/service_bindings/" + newID()
	op := a.want(a.do("PUT", async(bind), bindBody(planStd, nil)), http.StatusAccepted, "bind on a").str("operation")
	g.waitEntered(t)

	// The backend hangs for three leases; b and c look for expired
	// leases every quarter of one. The calls a makes meanwhile run out
	// (the call deadline is half the lease) and are retried.
	time.Sleep(3 * ttl)
	for _, h := range []*harness{b, c} {
		if n := h.drv.count("EnsureCredential"); n != 0 {
			t.Errorf("another replica called EnsureCredential %d times while a held the lease", n)
		}
		if n := h.metric("bucketbroker_lease_takeovers_total"); n != 0 {
			t.Errorf("another replica took over %v operations", n)
		}
	}
	if n := a.metric("bucketbroker_lease_renewals_total"); n == 0 {
		t.Error("a never renewed its lease during the stall")
	}
	if n := a.metric("bucketbroker_backend_retries_total"); n == 0 {
		t.Error("a's calls into the stalled backend were never cut off and retried")
	} else if calls := a.metric("bucketbroker_backend_calls_total"); calls <= n {
		t.Errorf("%v backend calls counted, want more than the %v retries (each retry follows a failed call, and the provision's calls succeeded)", calls, n)
	}
	g.release()

	if s := b.waitOp(bind, op); s != "succeeded" {
		t.Fatalf("bind ended %q", s)
	}
	cr := c.want(c.do("PUT", bind, bindBody(planStd, nil)), http.StatusOK, "bind again on c").creds()
	ak := cr["access_key_id"].(string)
	if err := canWrite(ak, cr["secret_access_key"].(string), cr["bucket"].(string)); err != nil {
		t.Errorf("the answered credentials do not work: %v", err)
	}
	users := a.users()
	if len(users) != 1 {
		t.Fatalf("users = %v, want one", users)
	}
	for u, keys := range users {
		if len(keys) != 1 || keys[0] != ak {
			t.Errorf("user %s has keys %v, want only the answered %s", u, keys, ak)
		}
	}
}

// TestLostLeaseStopsWorker takes a bind's lease away from its holder while
// the holder is inside a backend call (as a replica would after the lease
// ran out): the holder's call is cut off at once and it makes no further
// backend call or write, even when the backend comes back.
func TestLostLeaseStopsWorker(t *testing.T) {
	const ttl = 2 * time.Second
	a := newHarness(t, harnessOpts{postgres: true, replica: "a", leaseTTL: ttl, callTimeout: ttl * 9 / 10})
	id := instancePth + newID()
	a.want(a.do("PUT", id, provisionBody(planStd, nil)), http.StatusCreated, "provision")

	held := make(chan struct{}, 10)
	back := make(chan struct{})
	a.drv.hook("EnsureCredential", func(context.Context) error {
		held <- struct{}{}
		<-back // the backend stalls, whatever the caller does
		return nil
	})
	bindID := newID()
	bind := id + "/service_bindings/" + bindID
	a.want(a.do("PUT", async(bind), bindBody(planStd, nil)), http.StatusAccepted, "bind")
	<-held

	// Another replica takes the lease over.
	ctx := context.Background()
	stolen := setLease(t, a, bindID, "z", time.Now().Add(time.Hour))
	waitFor(t, "a stops its worker", func() bool { return a.metric("bucketbroker_leases_lost_total") == 1 })

	// The backend comes back: what the lost holder asked for is never
	// carried out, and the record is left to its new holder.
	close(back)
	waitFor(t, "a's worker to go", func() bool { return a.metric("bucketbroker_operations_in_flight") == 0 })
	if users := a.users(); len(users) != 0 {
		t.Errorf("users = %v, want none: the holder that lost its lease went on", users)
	}
	r, err := a.store.Get(ctx, engine.KindBinding, bindID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Version != stolen.Version || r.Lease != "z" {
		t.Errorf("record written after the lease was lost: version %d (want %d), lease %q", r.Version, stolen.Version, r.Lease)
	}
}

// TestOverlappingHoldersConverge lets two holders of one bind overlap, as
// a process paused past its lease would: holder a is inside its key
// creation when its lease is taken over; b drives the bind to its end; then
// a's call is carried out after all, and a goes on. The rule (create a key
// beside the others, record it, only then delete the others; a holder
// whose record write loses deletes only the key it made) leaves exactly
// the key b recorded and answered. (A late call that deleted every key but
// the one it knew, none, would make one nobody was given.)
func TestOverlappingHoldersConverge(t *testing.T) {
	o := newOverlap(t, time.Second, nil)
	a, b, bind := o.a, o.b, o.bind
	// b takes over.
	cr := o.answered(t)
	if n := b.metric("bucketbroker_lease_takeovers_total"); n != 1 {
		t.Errorf("b counted %v takeovers, want 1", n)
	}
	ak := cr["access_key_id"].(string)

	// a wakes up inside its call, which the backend carries out.
	o.resume(t)
	onlyAnsweredKey(t, a, cr)
	if again := a.want(a.do("PUT", bind, bindBody(planStd, nil)), http.StatusOK, "bind again on a").creds(); again["access_key_id"] != ak {
		t.Errorf("a answers key %v, b answered %s", again["access_key_id"], ak)
	}
}

// TestOverlappingBindAndUnbind is TestOverlappingHoldersConverge with an
// unbind instead of the takeover: while holder a is paused inside its key
// creation, the binding is unbound on b; then a's call is carried out,
// making the user and a key again. a deletes what it made, and nothing is
// left under the binding's name. (Deleting only the key left the user.)
func TestOverlappingBindAndUnbind(t *testing.T) {
	o := newOverlap(t, time.Second, nil)
	a, b, bind := o.a, o.b, o.bind
	b.want(b.do("DELETE", del(bind, planStd, false), nil), http.StatusOK, "unbind on b")

	o.resume(t)
	if users := a.users(); len(users) != 0 {
		t.Errorf("users = %v after the unbind, want none", users)
	}
}

// TestResumeIsBounded restarts an engine with 1,000 provisions in flight:
// the restarted engine drives no more of them at once than its workers,
// and every one of them succeeds. (A goroutine each at start-up would have
// them all call the backend together.)
func TestResumeIsBounded(t *testing.T) {
	const n, workers = 1000, 8
	a := newHarness(t, harnessOpts{postgres: true, replica: "r", workers: workers})
	stall := make(chan struct{})
	a.drv.hook("Observe", func(ctx context.Context) error {
		select {
		case <-stall:
		case <-ctx.Done():
		}
		return errors.New("backend down")
	})
	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for i := range ids {
		ids[i] = newID()
		wg.Add(1)
		sem <- struct{}{}
		go func(id string) {
			defer wg.Done()
			defer func() { <-sem }()
			if r := a.doQuiet("PUT", async(instancePth+id), provisionBody(planStd, nil)); r.code != http.StatusAccepted {
				errs <- fmt.Errorf("provision %s: %d %v", id, r.code, r.body)
			}
		}(ids[i])
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if d := a.metric("bucketbroker_work_queue_depth"); d < n-2*workers {
		t.Errorf("queue depth %v with %d operations and %d workers", d, n, workers)
	}
	if p := a.drv.peak.Load(); p > workers {
		t.Errorf("%d backend calls at once with %d workers", p, workers)
	}
	// The process stops (its calls cut off) with every provision in
	// flight; it comes back under the same replica id.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = a.eng.Shutdown(ctx)
	close(stall)

	b := newHarness(t, harnessOpts{postgres: true, peer: a, replica: "r", workers: workers, noStart: true})
	resumed := time.Now()
	if err := b.eng.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		left, err := b.store.List(context.Background(), engine.ListOptions{Unfinished: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d operations still unfinished after 10 minutes", len(left))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d provisions resumed and finished in %s with %d workers: at most %d backend calls at once",
		n, time.Since(resumed).Round(time.Millisecond), workers, b.drv.peak.Load())
	if p := b.drv.peak.Load(); p > workers {
		t.Errorf("%d backend calls at once after the restart, with %d workers", p, workers)
	}
	recs, err := b.store.List(context.Background(), engine.ListOptions{Kind: engine.KindInstance})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != n {
		t.Fatalf("%d instances stored, want %d", len(recs), n)
	}
	for _, r := range recs {
		if r.Op.State != engine.OpSucceeded {
			t.Errorf("instance %s: %s %s: %s", r.ID, r.Op.Type, r.Op.State, r.Op.Description)
		}
	}
	if got := len(b.buckets()); got != n {
		t.Errorf("%d buckets, want %d", got, n)
	}
}

// waitFor polls cond for up to a minute (a bound for a hang, not a speed
// target).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("still waiting for %s after a minute", what)
		}
	}
}

// TestRetriesDoNotStarveRequests fills every worker of an engine with binds
// whose backend calls keep failing (they retry with backoff until their
// deadline), then sends a new synchronous provision: it is answered 201,
// because a worker gives its place back while it backs off. (Were the
// places held through the backoff, the provision would wait in the queue
// until its sync timeout.)
func TestRetriesDoNotStarveRequests(t *testing.T) {
	const workers = 2
	h := newHarness(t, harnessOpts{postgres: true, workers: workers, syncTimeout: 20 * time.Second})
	id := instancePth + newID()
	h.want(h.do("PUT", id, provisionBody(planStd, nil)), http.StatusCreated, "provision")
	h.drv.hook("EnsureCredential", func(context.Context) error { return errors.New("backend says no") })
	for range 2 * workers {
		h.want(h.do("PUT", async(id+"/service_bindings/"+newID()), bindBody(planStd, nil)), http.StatusAccepted, "bind")
	}
	waitFor(t, "the binds to retry", func() bool { return h.metric("bucketbroker_backend_retries_total") >= 4*workers })

	h.want(h.do("PUT", instancePth+newID(), provisionBody(planStd, nil)), http.StatusCreated, "provision while the binds retry")
}

// TestStaleHolderAtKeyLimitKeepsRecordedKey: holder a is paused before its
// first key call; b takes over, records its key and answers it; then a
// late create leaves a second key, so the user is at IAM's limit of two.
// a wakes and makes its call: the driver deletes neither key (it cannot
// know which is recorded), a's record write fails, and a stops. (Deleting
// the oldest key to make room would delete the one b had answered.)
func TestStaleHolderAtKeyLimitKeepsRecordedKey(t *testing.T) {
	o := newOverlap(t, time.Second, nil)
	a := o.a
	ctx := context.Background()
	cr := o.answered(t)
	ak := cr["access_key_id"].(string)

	// A late create nobody recorded, newer than the answered key.
	users := a.users()
	if len(users) != 1 {
		t.Fatalf("users = %v, want one", users)
	}
	var user string
	for u := range users {
		user = u
	}
	time.Sleep(1100 * time.Millisecond) // a later CreateDate
	late, err := a.iam.CreateAccessKey(ctx, &iam.CreateAccessKeyInput{UserName: &user})
	if err != nil {
		t.Fatal(err)
	}

	o.resume(t)
	if err := canWrite(ak, cr["secret_access_key"].(string), cr["bucket"].(string)); err != nil {
		t.Errorf("the answered credentials stopped working: %v", err)
	}
	keys := a.users()[user]
	if !slices.Contains(keys, ak) {
		t.Errorf("user %s has keys %v: the answered %s was deleted", user, keys, ak)
	}
	t.Logf("answered %s, late %s; the user has %v", ak, *late.AccessKey.AccessKeyId, keys)
}

// TestBindAfterTwoLostKeysConverges: the answers of the bind's first two
// key calls are lost after the backend made the keys (as two crashes at
// bind/key-created would leave them), so the user is at IAM's limit with
// two keys nobody recorded. The third call finds no room; the holder
// writes its record, which proves both unrecorded, lets them go, and the
// bind ends with one key, the answered one.
func TestBindAfterTwoLostKeysConverges(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	id := instancePth + newID()
	h.want(h.do("PUT", id, provisionBody(planStd, nil)), http.StatusCreated, "provision")
	var lost sync.Mutex
	n := 0
	h.drv.hook("EnsureCredential/after", func(context.Context) error {
		lost.Lock()
		defer lost.Unlock()
		if n++; n <= 2 {
			return fmt.Errorf("answer %d lost", n)
		}
		return nil
	})
	bind := id + "/service_bindings/" + newID()
	cr := h.want(h.do("PUT", bind, bindBody(planStd, nil)), http.StatusCreated, "bind").creds()
	ak := cr["access_key_id"].(string)
	if err := canWrite(ak, cr["secret_access_key"].(string), cr["bucket"].(string)); err != nil {
		t.Errorf("the answered credentials do not work: %v", err)
	}
	users := h.users()
	if len(users) != 1 {
		t.Fatalf("users = %v, want one", users)
	}
	for u, keys := range users {
		if !slices.Equal(keys, []string{ak}) {
			t.Errorf("user %s has keys %v, want only the answered %s", u, keys, ak)
		}
	}
	if got := h.drv.count("EnsureCredential"); got < 4 {
		t.Errorf("%d key calls, want at least 4 (two lost, one at the limit, one making room)", got)
	}
}

// TestLateKeyAfterRebindLeavesNewBinding: holder a is paused inside its key
// creation; the binding is unbound on b; a's call is carried out (making
// the user and a key again) and a's write fails. Just as a, finding the
// record deleted, goes to delete what it made, the same binding id is bound
// again on b. a deletes only its key, and the user only if no key is left:
// the new bind's user and answered key stay. (Revoking the whole user
// would take the new bind's key with it.)
func TestLateKeyAfterRebindLeavesNewBinding(t *testing.T) {
	o := newOverlap(t, 4*time.Second, nil)
	a, b, bind := o.a, o.b, o.bind
	b.want(b.do("DELETE", del(bind, planStd, false), nil), http.StatusOK, "unbind on b")

	// The rebind happens as a, having read the record deleted, makes its
	// first deletion.
	var rebound reply
	var rebind sync.Once
	hook := func(context.Context) error {
		rebind.Do(func() { rebound = b.doQuiet("PUT", bind, bindBody(planStd, nil)) })
		return nil
	}
	a.drv.hook("DeleteAccessKey", hook)
	a.drv.hook("RevokeCredential", hook)
	o.resume(t)
	if rebound.code != http.StatusCreated {
		t.Fatalf("rebind on b = %d %v, want 201", rebound.code, rebound.body)
	}
	cr := rebound.creds()
	ak := cr["access_key_id"].(string)
	if err := canWrite(ak, cr["secret_access_key"].(string), cr["bucket"].(string)); err != nil {
		t.Errorf("the rebind's credentials do not work: %v", err)
	}
	for u, keys := range a.users() {
		if !slices.Equal(keys, []string{ak}) {
			t.Errorf("user %s has keys %v, want only the rebind's %s", u, keys, ak)
		}
	}
}

// TestGoneKeyHoldersKeepEachOthers: holder a has recorded its key, which is
// then deleted behind the bind's back, and a pauses inside its call that
// deletes the other keys. b takes over, finds the recorded key gone, makes
// a key beside the others, records it and answers it. a's call is carried
// out late: it deletes nothing (the key it keeps is gone), a's write of a
// new key fails, and a deletes only the key it made. (A call that made a
// key and deleted every other would delete the one b had answered.) The
// user exists, marked, before a's first key call (as for a bind resumed
// after a crash): a key call that creates the user makes no second call.
func TestGoneKeyHoldersKeepEachOthers(t *testing.T) {
	o := newOverlap(t, time.Second, func(ctx context.Context, o *overlap, n int) (bool, error) {
		r, err := o.a.store.Get(ctx, engine.KindBinding, o.bindID)
		if err != nil {
			return false, err
		}
		switch n {
		case 1:
			_, err = o.a.iam.CreateUser(ctx, &iam.CreateUserInput{UserName: &r.Bucket.UserName, Path: aws.String(s3iam.UserPath),
				Tags: []iamtypes.Tag{{Key: aws.String(s3iam.OwnerTagKey), Value: &r.Bucket.Owner}}})
			return false, err
		case 2: // the call that deletes the other keys
			_, err = o.a.iam.DeleteAccessKey(ctx, &iam.DeleteAccessKeyInput{UserName: &r.Bucket.UserName, AccessKeyId: &r.Bucket.AccessKeyID})
			return err == nil, err
		}
		return false, nil
	})
	cr := o.answered(t)
	o.resume(t)
	onlyAnsweredKey(t, o.a, cr)
}

// overlap is two replicas of one engine sharing a PostgreSQL store, with a
// bind on a that is paused inside one of its key calls, as a process
// paused past its lease would be: blind to its context, its lease,
// everything; the backend carries the call out late (hookDriver.late)
// once wake is closed. a's lease has run out, as if a had stopped
// renewing it, so b may take the bind over.
type overlap struct {
	a, b   *harness
	bindID string
	bind   string // the binding's path
	op     string // the bind's operation
	wake   chan struct{}
}

// newOverlap sets an overlap up with leases of ttl. pause says whether a's
// n-th EnsureCredential call (from 1) is the one that pauses; nil pauses
// the first.
func newOverlap(t *testing.T, ttl time.Duration, pause func(ctx context.Context, o *overlap, n int) (bool, error)) *overlap {
	t.Helper()
	if pause == nil {
		pause = func(_ context.Context, _ *overlap, n int) (bool, error) { return n == 1, nil }
	}
	o := &overlap{wake: make(chan struct{})}
	o.a = newHarness(t, harnessOpts{postgres: true, replica: "a", leaseTTL: ttl})
	o.b = newHarness(t, harnessOpts{postgres: true, peer: o.a, replica: "b", leaseTTL: ttl})
	id := instancePth + newID()
	o.a.want(o.a.do("PUT", id, provisionBody(planStd, nil)), http.StatusCreated, "provision")

	paused := make(chan struct{}, 1)
	var mu sync.Mutex
	calls := 0
	o.a.drv.late.Store(true)
	o.a.drv.hook("EnsureCredential", func(ctx context.Context) error {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if stop, err := pause(ctx, o, n); !stop || err != nil {
			return err
		}
		paused <- struct{}{}
		<-o.wake
		return nil
	})
	o.bindID = newID()
	o.bind = id + "/service_bindings/" + o.bindID
	o.op = o.a.want(o.a.do("PUT", async(o.bind), bindBody(planStd, nil)), http.StatusAccepted, "bind on a").str("operation")
	<-paused
	setLease(t, o.a, o.bindID, "gone", time.Now().Add(-time.Second))
	return o
}

// answered waits for the bind, driven by b, to succeed, and returns the
// credentials b answers for it.
func (o *overlap) answered(t *testing.T) map[string]any {
	t.Helper()
	if s := o.b.waitOp(o.bind, o.op); s != "succeeded" {
		t.Fatalf("bind driven by b ended %q", s)
	}
	return o.b.want(o.b.do("PUT", o.bind, bindBody(planStd, nil)), http.StatusOK, "bind again on b").creds()
}

// resume lets a's paused call be carried out, and waits for a's worker to
// go.
func (o *overlap) resume(t *testing.T) {
	t.Helper()
	close(o.wake)
	waitFor(t, "a's worker to go", func() bool { return o.a.metric("bucketbroker_operations_in_flight") == 0 })
}

// onlyAnsweredKey checks that the answered credentials cr still work and
// that the backend holds one user with their key alone.
func onlyAnsweredKey(t *testing.T, h *harness, cr map[string]any) {
	t.Helper()
	ak := cr["access_key_id"].(string)
	if err := canWrite(ak, cr["secret_access_key"].(string), cr["bucket"].(string)); err != nil {
		t.Errorf("the answered credentials stopped working: %v", err)
	}
	users := h.users()
	if len(users) != 1 {
		t.Fatalf("users = %v, want one", users)
	}
	for u, keys := range users {
		if !slices.Equal(keys, []string{ak}) {
			t.Errorf("user %s has keys %v, want only the answered %s", u, keys, ak)
		}
	}
}

// setLease writes the binding's lease as another replica would (holder
// until until), whatever the holder writes meanwhile, and returns the
// record as written.
func setLease(t *testing.T, h *harness, bindID, holder string, until time.Time) *engine.Record {
	t.Helper()
	ctx := context.Background()
	for {
		r, err := h.store.Get(ctx, engine.KindBinding, bindID)
		if err != nil {
			t.Fatal(err)
		}
		r.Lease, r.LeaseUntil = holder, until
		if err = h.store.Update(ctx, r); err == nil {
			return r
		} else if !errors.Is(err, engine.ErrStale) {
			t.Fatal(err)
		}
	}
}
