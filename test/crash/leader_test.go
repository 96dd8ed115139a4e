package crash

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	obv1 "github.com/bucketbroker/bucketbroker/api/objectbucket/v1alpha1"
	"github.com/bucketbroker/bucketbroker/internal/objectbucket"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

const (
	// leaderUser is the user claimAPIServer's kubeconfig authenticates as.
	leaderUser = "bucketbroker-controller"
	// leaderWait bounds every wait of TestLeaderElection: for a replica
	// to lead (a SIGKILLed leader's Lease runs out after controller-
	// runtime's LeaseDuration, 15 s), for claims to be Bound or gone.
	leaderWait = 40 * time.Second
	// leaderLoad is how many claims are created at once before the leader
	// is killed.
	leaderLoad = 10
)

// TestLeaderElection runs two replicas of `bucketbroker controller` with
// leader election (the s3iam driver against one versitygw pair: replicas
// cannot share the embedded server) against a real API server, as users
// holding only the roles of config/rbac. One replica holds the Lease and
// binds a claim while the other reconciles nothing. The leader is stopped
// with SIGTERM: it releases the Lease, and the other binds the next claim.
// The stopped replica comes back as a follower, and the leader is killed
// with SIGKILL while claims are provisioned: the follower takes over once
// the Lease runs out and every claim converges. At each step a replica that
// does not hold the Lease must have reconciled nothing. In the end every
// claim has one bucket, one ObjectBucket and one user with one key (the
// Secret's, working in its bucket only), and deleting the claims leaves
// nothing on the backend.
func TestLeaderElection(t *testing.T) {
	api, kubeconfig := claimAPIServer(t)
	vgw := startVersitygw(t)
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ns, err := api.Namespace(ctx, "leader-")
	if err != nil {
		t.Fatal(err)
	}
	if err := api.LeaderElectionRole(ctx, root, leaderUser, ns); err != nil {
		t.Fatal(err)
	}
	const provisioner = "leader.crash.bucketbroker.io/bucket"
	reclaim := corev1.PersistentVolumeReclaimDelete
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "crash-leader"}, Provisioner: provisioner, ReclaimPolicy: &reclaim}
	if err := api.Client.Create(ctx, class); err != nil {
		t.Fatalf("create storage class: %v", err)
	}
	l := &leaderRun{t: t, ctx: ctx, k8s: api.Client, ns: ns, class: class.Name, uids: map[string]types.UID{}, foreign: "foreign-leader"}
	for _, name := range []string{"replica-a", "replica-b"} {
		c := harness.NewExternalController(t, binary, kubeconfig, provisioner, vgw.backend())
		c.Name, c.LeaseNamespace = name, ns
		l.replicas = append(l.replicas, c)
	}
	l.be = l.replicas[0].Backend
	if err := l.be.CreateBucket(l.foreign); err != nil {
		t.Fatalf("create the foreign bucket: %v", err)
	}

	// 1. Two replicas: one leads and binds a claim, the other waits.
	for _, c := range l.replicas {
		if err := c.TryStart(); err != nil {
			t.Fatal(err)
		}
	}
	leader, took := l.waitLeader(l.replicas...)
	follower := l.other(leader)
	holder := l.holder("")
	t.Logf("%s holds Lease %s/%s as %q, %s after both were ready", leader.Name, ns, l.lease().Name, holder, took.Round(time.Millisecond))
	l.createClaims("first")
	t.Logf("claim first Bound in %s", l.waitBound("first").Round(time.Millisecond))
	l.expectReconciled(leader)
	l.expectIdle(follower)

	// 2. SIGTERM: the leader releases the Lease on its way out.
	t0 := time.Now()
	leader.Stop()
	exited := time.Since(t0)
	afterExit := l.lease()
	if h := ptrValue(afterExit.Spec.HolderIdentity); h == holder {
		t.Errorf("%s exited after SIGTERM and Lease %s is still held by it (%q): it was not released", leader.Name, afterExit.Name, h)
	}
	next, _ := l.waitLeader(follower)
	termHandover := time.Since(t0)
	l.createClaims("after-term")
	bound := l.waitBound("after-term")
	holder = l.holder(holder)
	t.Logf("SIGTERM: %s exited in %s, Lease holder then %q; %s led %s after the signal (Lease holder %q); claim after-term Bound in %s, %s after the signal",
		leader.Name, exited.Round(time.Millisecond), ptrValue(afterExit.Spec.HolderIdentity), next.Name,
		termHandover.Round(time.Millisecond), holder, bound.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	l.expectReconciled(next)

	// The stopped replica comes back, as a rolling update brings it: it
	// waits for the Lease.
	if err := leader.TryStart(); err != nil {
		t.Fatal(err)
	}
	l.waitCampaigning(leader)
	l.expectIdle(leader)
	leader, follower = next, leader

	// 3. SIGKILL while claims are provisioned: nothing is released, the
	// follower takes over once the Lease runs out.
	var load []string
	for i := range leaderLoad {
		load = append(load, fmt.Sprintf("load-%d", i))
	}
	l.createClaims(load...)
	l.waitStarted(load)
	tk := time.Now()
	leader.Kill()
	nBound, started, untouched := l.tally(load)
	made, err := l.be.Buckets()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("SIGKILL of %s with %d claims Bound, %d started, %d untouched; %d buckets on the backend (2 of earlier claims)",
		leader.Name, nBound, started, untouched, len(made))
	if nBound == len(load) {
		t.Errorf("every claim was Bound before the kill: the kill did not come while claims were provisioned")
	}
	next, _ = l.waitLeader(follower)
	killHandover := time.Since(tk)
	holder = l.holder(holder)
	l.waitBound(load...)
	killConverged := time.Since(tk)
	t.Logf("SIGKILL: %s led %s after the kill (Lease holder %q); every claim Bound %s after the kill", next.Name,
		killHandover.Round(time.Millisecond), holder, killConverged.Round(time.Millisecond))

	all := append([]string{"first", "after-term"}, load...)
	l.checkBound(all, next)
	l.deleteClaims(all)
	l.checkClean(all)
	t.Logf("leader election: handover %s after SIGTERM, %s after SIGKILL (all %d claims Bound %s after it); %s with envtest and versitygw up",
		termHandover.Round(time.Millisecond), killHandover.Round(time.Millisecond), len(load),
		killConverged.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	// Not a failure of the claims: the Lease's "became leader" Event is
	// recorded with the core/v1 Events API, which config/rbac does not grant.
	for _, c := range l.replicas {
		if strings.Contains(c.Log(), "events is forbidden") {
			t.Logf("note: %s's leader election Event was refused (events is forbidden: config/rbac grants events.k8s.io Events only)", c.Name)
			break
		}
	}
}

// leaderRun is TestLeaderElection's cluster, replicas and claims.
type leaderRun struct {
	t         *testing.T
	ctx       context.Context
	k8s       client.Client
	be        harness.Backend
	replicas  []*harness.Controller
	ns, class string
	foreign   string // a bucket that is no claim's
	uids      map[string]types.UID
	// keys are the Secrets' keys of the Bound claims, by claim name.
	keys map[string][2]string
}

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func (l *leaderRun) other(c *harness.Controller) *harness.Controller {
	for _, r := range l.replicas {
		if r != c {
			return r
		}
	}
	return nil
}

// state reads whether a replica leads (controller-runtime's
// leader_election_master_status gauge) and how many reconciles it has
// counted. The reconciles are read first: a replica sets the gauge before
// it starts its controller and keeps it while it runs, so a count above
// zero with the gauge at zero is a reconcile without the Lease.
func (l *leaderRun) state(c *harness.Controller) (leads bool, reconciles float64, err error) {
	reconciles, err = c.Metric("controller_runtime_reconcile_total", `controller="objectbucketclaim"`)
	if err != nil {
		return false, 0, err
	}
	g, err := c.Metric("leader_election_master_status")
	return g == 1, reconciles, err
}

// expectReconciled checks that the leader counts the reconciles that bound
// its claims, else a follower's zero would prove nothing. A reconcile is
// counted when it returns, just after the claim's status write: the count
// is given a moment.
func (l *leaderRun) expectReconciled(c *harness.Controller) {
	l.t.Helper()
	for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(20 * time.Millisecond) {
		_, n, err := l.state(c)
		if err != nil {
			l.t.Fatal(err)
		}
		if n > 0 {
			return
		}
	}
	l.t.Errorf("%s, the leader, counts no reconcile of the claim it bound: controller_runtime_reconcile_total is not read right", c.Name)
}

// waitLeader waits until one of the running candidates leads, and fails
// the test if two lead at once or one that does not lead has reconciled.
func (l *leaderRun) waitLeader(candidates ...*harness.Controller) (*harness.Controller, time.Duration) {
	l.t.Helper()
	start := time.Now()
	for time.Since(start) < leaderWait {
		var leaders []*harness.Controller
		for _, c := range candidates {
			leads, n, err := l.state(c)
			switch {
			case err != nil:
				l.t.Fatal(err)
			case leads:
				leaders = append(leaders, c)
			case n > 0:
				l.t.Fatalf("%s reconciled %v times without leading", c.Name, n)
			}
		}
		switch len(leaders) {
		case 0:
		case 1:
			return leaders[0], time.Since(start)
		default:
			l.t.Fatalf("%d replicas lead at once", len(leaders))
		}
		time.Sleep(20 * time.Millisecond)
	}
	l.t.Fatalf("no replica led within %s", leaderWait)
	return nil, 0
}

// lease returns the namespace's only Lease.
func (l *leaderRun) lease() coordinationv1.Lease {
	l.t.Helper()
	var list coordinationv1.LeaseList
	if err := l.k8s.List(l.ctx, &list, client.InNamespace(l.ns)); err != nil {
		l.t.Fatalf("list leases: %v", err)
	}
	if len(list.Items) != 1 {
		l.t.Fatalf("%d Leases in %s, want exactly one", len(list.Items), l.ns)
	}
	return list.Items[0]
}

// holder returns the Lease's holder, which must be set and not be the
// previous one.
func (l *leaderRun) holder(previous string) string {
	l.t.Helper()
	h := ptrValue(l.lease().Spec.HolderIdentity)
	if h == "" || h == previous {
		l.t.Fatalf("Lease holder %q while a replica leads, want a holder other than %q", h, previous)
	}
	return h
}

// expectIdle checks a replica that does not lead: it counts no reconcile,
// and its log says it asked for the Lease and never started a worker.
func (l *leaderRun) expectIdle(c *harness.Controller) {
	l.t.Helper()
	leads, n, err := l.state(c)
	switch {
	case err != nil:
		l.t.Fatal(err)
	case leads:
		l.t.Errorf("%s leads, want it waiting for the Lease", c.Name)
	case n != 0:
		l.t.Errorf("%s reconciled %v times without the Lease", c.Name, n)
	}
	log := lastRun(c.Log())
	if strings.Contains(log, "Starting workers") {
		l.t.Errorf("%s started its workers without the Lease", c.Name)
	}
	if !strings.Contains(log, "Attempting to acquire leader lease") {
		l.t.Errorf("%s's log does not show it asking for the Lease", c.Name)
	}
}

// lastRun is what the process wrote since its last start.
func lastRun(log string) string {
	if i := strings.LastIndex(log, "=== start "); i >= 0 {
		return log[i:]
	}
	return log
}

// waitCampaigning waits until a started replica has asked for the Lease.
func (l *leaderRun) waitCampaigning(c *harness.Controller) {
	l.t.Helper()
	for start := time.Now(); time.Since(start) < leaderWait; time.Sleep(20 * time.Millisecond) {
		if strings.Contains(lastRun(c.Log()), "Attempting to acquire leader lease") {
			return
		}
	}
	l.t.Fatalf("%s did not ask for the Lease within %s of its restart", c.Name, leaderWait)
}

func (l *leaderRun) createClaims(names ...string) {
	l.t.Helper()
	for _, name := range names {
		obc := &obv1.ObjectBucketClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: name},
			Spec:       obv1.ObjectBucketClaimSpec{StorageClassName: l.class},
		}
		if err := l.k8s.Create(l.ctx, obc); err != nil {
			l.t.Fatalf("create claim %s: %v", name, err)
		}
		l.uids[name] = obc.UID
	}
}

func (l *leaderRun) claims() map[string]obv1.ObjectBucketClaim {
	l.t.Helper()
	var list obv1.ObjectBucketClaimList
	if err := l.k8s.List(l.ctx, &list, client.InNamespace(l.ns)); err != nil {
		l.t.Fatalf("list claims: %v", err)
	}
	m := map[string]obv1.ObjectBucketClaim{}
	for _, c := range list.Items {
		m[c.Name] = c
	}
	return m
}

// waitStarted waits until the leader has begun to provision one of the
// claims (the claim carries its finalizer).
func (l *leaderRun) waitStarted(names []string) {
	l.t.Helper()
	for start := time.Now(); time.Since(start) < leaderWait; time.Sleep(5 * time.Millisecond) {
		cs := l.claims()
		for _, n := range names {
			if c := cs[n]; len(c.Finalizers) > 0 {
				return
			}
		}
	}
	l.t.Fatalf("no claim of %v started within %s", names, leaderWait)
}

// tally counts the claims that are Bound, started (a finalizer) and not
// touched yet.
func (l *leaderRun) tally(names []string) (bound, started, untouched int) {
	cs := l.claims()
	for _, n := range names {
		switch c := cs[n]; {
		case c.Status.Phase == obv1.PhaseBound:
			bound++
		case len(c.Finalizers) > 0:
			started++
		default:
			untouched++
		}
	}
	return bound, started, untouched
}

// waitBound waits until every named claim is Bound and returns how long
// that took; a Failed claim or one not Bound in time fails the test.
func (l *leaderRun) waitBound(names ...string) time.Duration {
	l.t.Helper()
	start := time.Now()
	var last string
	for time.Since(start) < leaderWait {
		cs := l.claims()
		pending := 0
		for _, n := range names {
			c := cs[n]
			switch c.Status.Phase {
			case obv1.PhaseBound:
			case obv1.PhaseFailed:
				l.t.Fatalf("claim %s Failed: %s", n, conditions(&c))
			default:
				pending++
				last = fmt.Sprintf("%s: phase %q, %s", n, c.Status.Phase, conditions(&c))
			}
		}
		if pending == 0 {
			return time.Since(start)
		}
		time.Sleep(50 * time.Millisecond)
	}
	l.t.Fatalf("claims not Bound within %s; %s", leaderWait, last)
	return 0
}

// objectBuckets maps the UIDs of the claims their ObjectBuckets are bound
// to, to those ObjectBuckets.
func (l *leaderRun) objectBuckets() map[types.UID][]obv1.ObjectBucket {
	l.t.Helper()
	var list obv1.ObjectBucketList
	if err := l.k8s.List(l.ctx, &list); err != nil {
		l.t.Fatalf("list object buckets: %v", err)
	}
	m := map[types.UID][]obv1.ObjectBucket{}
	for _, ob := range list.Items {
		if uid := boundTo(&ob); uid != "" {
			m[uid] = append(m[uid], ob)
		}
	}
	return m
}

// checkBound checks every Bound claim as TestClaimCrashPoints checks one,
// with the backend shared by them all: it holds exactly one bucket and one
// user with one key (the claim's Secret's) per claim and nothing else, and
// each Secret's keys read and write their bucket and are refused by a
// bucket that is not the claim's.
func (l *leaderRun) checkBound(names []string, c *harness.Controller) {
	l.t.Helper()
	cs, obs := l.claims(), l.objectBuckets()
	var wantBuckets []string
	wantKeys := map[string][]string{}
	l.keys = map[string][2]string{}
	for _, n := range names {
		claim := cs[n]
		bucket := claim.Annotations[objectbucket.AnnotationBucketName]
		if bucket == "" || !ready(&claim) {
			l.t.Errorf("claim %s: bucket %q, %s; want a bucket and Ready", n, bucket, conditions(&claim))
		}
		if want := objectbucket.NameForClaim(claim.UID); claim.Spec.ObjectBucketName != want {
			l.t.Errorf("claim %s: spec.objectBucketName %q, want %q", n, claim.Spec.ObjectBucketName, want)
		}
		switch mine := obs[claim.UID]; {
		case len(mine) != 1:
			l.t.Errorf("claim %s: %d ObjectBuckets carry its UID, want 1", n, len(mine))
		case mine[0].Status.Phase != obv1.PhaseBound || mine[0].Spec.Endpoint == nil || mine[0].Spec.Endpoint.BucketName != bucket:
			l.t.Errorf("claim %s: ObjectBucket %s phase %q, endpoint %+v; want Bound, bucket %s", n, mine[0].Name, mine[0].Status.Phase, mine[0].Spec.Endpoint, bucket)
		}
		key := client.ObjectKey{Namespace: l.ns, Name: n}
		sec := &corev1.Secret{}
		if err := l.k8s.Get(l.ctx, key, sec); err != nil {
			l.t.Errorf("claim %s: Secret: %v", n, err)
			continue
		}
		ak, sk := string(sec.Data[objectbucket.KeyAccessKeyID]), string(sec.Data[objectbucket.KeySecretAccessKey])
		if !metav1.IsControlledBy(sec, &claim) || ak == "" || sk == "" {
			l.t.Errorf("claim %s: Secret owned by %v with key %q, want controlled by the claim, with keys", n, sec.OwnerReferences, ak)
		}
		cm := &corev1.ConfigMap{}
		if err := l.k8s.Get(l.ctx, key, cm); err != nil {
			l.t.Errorf("claim %s: ConfigMap: %v", n, err)
		} else if got := cm.Data[objectbucket.KeyBucketHost] + ":" + cm.Data[objectbucket.KeyBucketPort]; cm.Data[objectbucket.KeyBucketName] != bucket || got != c.S3Addr() {
			l.t.Errorf("claim %s: ConfigMap names bucket %q at %s, want %q at %s", n, cm.Data[objectbucket.KeyBucketName], got, bucket, c.S3Addr())
		}
		wantBuckets = append(wantBuckets, bucket)
		wantKeys[driver.UserName(harness.ControllerPrefix, "claim", string(claim.UID))] = []string{ak}
		l.keys[n] = [2]string{ak, sk}
		if err := l.be.ReadWrite(ak, sk, bucket); err != nil {
			l.t.Errorf("claim %s: the Secret's keys in its bucket: %v", n, err)
		}
		switch denied, err := l.be.Denied(ak, sk, l.foreign); {
		case err != nil:
			l.t.Errorf("claim %s: write into the foreign bucket: %v", n, err)
		case !denied:
			l.t.Errorf("claim %s: the Secret's keys write into %s, which is not the claim's", n, l.foreign)
		}
	}
	l.expectBackend(wantBuckets, wantKeys)
}

// expectBackend checks that the backend holds exactly the buckets and the
// users with the keys wanted, among names of the controller's prefix.
func (l *leaderRun) expectBackend(wantBuckets []string, wantKeys map[string][]string) {
	l.t.Helper()
	buckets, err := l.be.Buckets()
	if err != nil {
		l.t.Fatal(err)
	}
	slices.Sort(buckets)
	slices.Sort(wantBuckets)
	if !slices.Equal(buckets, wantBuckets) {
		l.t.Errorf("backend buckets %v, want exactly %v", buckets, wantBuckets)
	}
	keys, err := l.be.Keys()
	if err != nil {
		l.t.Fatal(err)
	}
	for u, ks := range keys {
		if want, ok := wantKeys[u]; !ok || !slices.Equal(ks, want) {
			l.t.Errorf("backend user %s holds keys %v, want %v", u, ks, want)
		}
	}
	for u, want := range wantKeys {
		if _, ok := keys[u]; !ok {
			l.t.Errorf("no backend user %s (keys %v)", u, want)
		}
	}
}

// deleteClaims deletes the claims at once and waits until they are gone.
func (l *leaderRun) deleteClaims(names []string) {
	l.t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	for _, n := range names {
		uid := l.uids[n]
		wg.Go(func() {
			c := &obv1.ObjectBucketClaim{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: n}}
			if err := l.k8s.Delete(l.ctx, c, client.Preconditions{UID: &uid}); err != nil {
				errs <- fmt.Errorf("delete claim %s: %w", n, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		l.t.Fatal(err)
	}
	start := time.Now()
	for {
		cs := l.claims()
		if len(cs) == 0 {
			l.t.Logf("%d claims deleted in %s", len(names), time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > leaderWait {
			var left []string
			for n, c := range cs {
				left = append(left, fmt.Sprintf("%s (finalizers %v, %s)", n, c.Finalizers, conditions(&c)))
			}
			l.t.Fatalf("claims not gone within %s: %v", leaderWait, left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkClean checks that the deleted claims left no ObjectBucket, Secret
// or ConfigMap (but one leftToCollector), no bucket or user on the backend and no key that still
// authenticates, and that the foreign bucket is still there.
func (l *leaderRun) checkClean(names []string) {
	l.t.Helper()
	obs := l.objectBuckets()
	for _, n := range names {
		if left := obs[l.uids[n]]; len(left) > 0 {
			l.t.Errorf("claim %s deleted, %d ObjectBuckets of it left", n, len(left))
		}
		for _, obj := range []client.Object{&corev1.Secret{}, &corev1.ConfigMap{}} {
			switch err := l.k8s.Get(l.ctx, client.ObjectKey{Namespace: l.ns, Name: n}, obj); {
			case err == nil && leftToCollector(obj, l.uids[n]):
			case err == nil:
				l.t.Errorf("claim %s deleted, its %T left", n, obj)
			case !apierrors.IsNotFound(err):
				l.t.Errorf("get %T %s: %v", obj, n, err)
			}
		}
		if k, ok := l.keys[n]; ok && l.be.Authenticates(k[0], k[1]) {
			l.t.Errorf("claim %s deleted, its key %s still authenticates", n, k[0])
		}
	}
	l.expectBackend(nil, nil)
	switch ok, err := l.be.BucketExists(l.foreign); {
	case err != nil:
		l.t.Error(err)
	case !ok:
		l.t.Errorf("bucket %s, no claim's, is gone", l.foreign)
	}
}
