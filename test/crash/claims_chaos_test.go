package crash

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

var (
	claimsChaosClaims = flag.Int("claims-chaos-claims", 40, "TestClaimsUnderKill: claims (1 to 200)")
	claimsChaosKills  = flag.Int("claims-chaos-kills", 6, "TestClaimsUnderKill: kill -9s while the claims are provisioned, deleted and repaired (0 to 20; a third as many more while the rest are deleted)")
	claimsChaosSeed   = flag.Uint64("claims-chaos-seed", 0, "TestClaimsUnderKill: seed of the script and the kill points (0: from the clock; the test logs it)")
)

const (
	// claimsChaosClients is how many users create and delete claims at
	// once; each runs whole claim scripts, one after another.
	claimsChaosClients = 6
	// claimsChaosWait bounds each wait of a script (Bound, gone, the
	// Secret back), across the kills and restarts that fall into it.
	claimsChaosWait = 60 * time.Second
	// claimsChaosPoll is how often a script looks at its claim.
	claimsChaosPoll = 150 * time.Millisecond
	// claimsChaosMaxDelay bounds the random delay of a kill after its
	// point of the script, and of a prompt deletion after the create.
	claimsChaosMaxDelay = 300 * time.Millisecond
)

// claimNaming is how a claim asks for its bucket's name.
type claimNaming string

const (
	namingPlain    claimNaming = "plain"    // neither: the controller's bb-... name from the UID
	namingGenerate claimNaming = "generate" // spec.generateBucketName
	namingExact    claimNaming = "exact"    // spec.bucketName
)

// claimFate is what the script does with a claim after creating it.
type claimFate string

const (
	fateLive        claimFate = "live"         // waits for Bound
	fateDeleteSoon  claimFate = "delete-soon"  // deleted 0-300 ms after its create, mostly while provisioning
	fateDeleteBound claimFate = "delete-bound" // deleted once Bound
	fateDrift       claimFate = "drift"        // once Bound, its Secret is deleted: back with the same keys
)

// claimFates is the order in which blocks of six claims (every naming
// under both reclaim policies) get their fate: at 40 claims, 18 live, 10
// deleted at once, 6 deleted once Bound, 6 with their Secret deleted.
var claimFates = []claimFate{fateLive, fateDeleteSoon, fateLive, fateDeleteBound, fateLive, fateDrift, fateDeleteSoon}

// chaosClaim is the script of one claim and what the test saw of it.
type chaosClaim struct {
	name   string
	naming claimNaming
	// genPrefix is spec.generateBucketName (namingGenerate), exact
	// spec.bucketName (namingExact).
	genPrefix, exact string
	retain           bool
	fate             claimFate
	deleteAfter      time.Duration // fateDeleteSoon

	// Written by the claim's script alone during the load, read after it.
	uid       types.UID
	created   time.Time // when its create was answered
	deleting  time.Time // when its delete was sent
	goneAt    time.Time // when the API server first said it is gone
	everBound bool      // the test saw it Bound
	bucket    string    // the claim's bucket-name annotation, once Bound
	ak, sk    string    // the Secret's keys, as last read
	live      bool      // exists (is meant to) at the check
}

// ownsBucket says whether a bucket name is the one this claim's naming
// gives it: the exact name, the generated prefix, or the name derived from
// the UID.
func (c *chaosClaim) ownsBucket(name string) bool {
	switch c.naming {
	case namingExact:
		return name == c.exact
	case namingGenerate:
		return strings.HasPrefix(name, c.genPrefix+"-")
	}
	return c.uid != "" && name == driver.BucketName(harness.ControllerPrefix, "claim", string(c.uid))
}

func (c *chaosClaim) user() string {
	return driver.UserName(harness.ControllerPrefix, "claim", string(c.uid))
}

func (c *chaosClaim) policy() string {
	if c.retain {
		return "Retain"
	}
	return "Delete"
}

// chaosVerdict is the test's verdict, marked by scripts running at once.
type chaosVerdict struct {
	mu    sync.Mutex
	out   outcome
	notes []string
	stage string // what the test is doing, before each note
}

func (v *chaosVerdict) mark(o outcome, format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if severity[o] > severity[v.out] {
		v.out = o
	}
	v.notes = append(v.notes, fmt.Sprintf("%s: %s: ", v.stage, o)+fmt.Sprintf(format, args...))
}

func (v *chaosVerdict) enter(stage string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.stage = stage
}

func (v *chaosVerdict) outcome() outcome {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.out
}

// claimsChaos is one run of TestClaimsUnderKill.
type claimsChaos struct {
	ctx     context.Context
	stop    context.CancelFunc // ends the scripts when the controller cannot start
	k8s     client.Client
	ctl     *harness.Controller
	v       *chaosVerdict
	ns      string
	classes map[bool]string // by retain
	foreign string          // a bucket the controller never made
	claims  []*chaosClaim

	mu    sync.Mutex
	kills []time.Time // every kill -9, for the notes
}

// TestClaimsUnderKill is kill -9 at random moments while one `bucketbroker
// controller` process serves many claims at once: the controller's
// TestKillUnderLoad. A few users create 40 claims (plain, with
// generateBucketName, with bucketName; under the reclaim policies Delete
// and Retain), delete some again at once (mostly while they are
// provisioned) and some once Bound, and delete the Secret of some Bound
// claims, which must come back with the same keys. Meanwhile the
// controller is killed with SIGKILL and started again on the same data dir.
// When every script has seen its end, the test checks what exists: every
// live claim Bound with one ObjectBucket, one bucket and one key (the
// Secret's, working in its bucket and refused elsewhere); every deleted
// claim gone with nothing of it left (its bucket kept only under Retain);
// nothing on the backend that no claim explains. Then every claim is
// deleted, with more kills, and the backend must hold only the retained
// buckets and no user.
func TestClaimsUnderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("kill -9 under load of claims takes half a minute or more")
	}
	api, kubeconfig := claimAPIServer(t)
	seed := *claimsChaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -claims-chaos-seed %d; the moments of the kills also depend on timing)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	n := min(max(*claimsChaosClaims, 1), 200)
	kills := min(max(*claimsChaosKills, 0), 20)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	x := newClaimsChaos(ctx, t, api, kubeconfig)
	x.ctx, x.stop = context.WithCancel(ctx)
	defer x.stop()
	for i := range n {
		c := &chaosClaim{
			name:   fmt.Sprintf("c-%03d", i),
			naming: []claimNaming{namingPlain, namingGenerate, namingExact}[i%3],
			retain: i/3%2 == 1,
			fate:   claimFates[i/6%len(claimFates)],
		}
		switch c.naming {
		case namingGenerate:
			c.genPrefix = fmt.Sprintf("gen-%03d", i)
		case namingExact:
			c.exact = fmt.Sprintf("exact-%03d", i)
		}
		if c.fate == fateDeleteSoon {
			c.deleteAfter = time.Duration(rng.Int64N(int64(claimsChaosMaxDelay)))
		}
		x.claims = append(x.claims, c)
	}
	order := slices.Clone(x.claims)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })

	if err := x.ctl.TryStart(); err != nil {
		t.Fatal(err)
	}
	if err := x.ctl.Backend.CreateBucket(x.foreign); err != nil {
		t.Fatalf("create the foreign bucket: %v", err)
	}
	t.Cleanup(func() {
		// The harness shows the log's tail; the whole of it, with the
		// moments of the kills, is kept with go test -artifacts.
		if t.Failed() {
			path := filepath.Join(t.ArtifactDir(), "controller.log")
			if err := os.WriteFile(path, []byte(x.ctl.Log()), 0o644); err == nil {
				t.Logf("the controller's whole log: %s (kept with -artifacts)", path)
			}
		}
	})
	t.Logf("namespace %s, %d claims (%s), %d clients", x.ns, n, x.census(), claimsChaosClients)

	// The load: the scripts, with kills at random points of it.
	x.v.enter("load")
	start := time.Now()
	at := x.load(rng, kills, order, x.script)
	t.Logf("load done in %s with %d kill -9s at %v", time.Since(start).Round(time.Millisecond), len(at), at)
	// A claim that never got Bound or gone leaves nothing to compare;
	// anything else is noted and the checks go on.
	if severity[x.v.outcome()] >= severity[stuck] {
		t.Fatalf("the scripts: %s\n%s", x.v.out, strings.Join(firstN(x.v.notes, 50), "\n"))
	}
	for _, c := range x.claims {
		c.live = c.fate == fateLive || c.fate == fateDrift
	}
	x.v.enter("after the load")
	x.check()
	if severity[x.v.outcome()] >= severity[stuck] {
		t.Fatalf("after the load: %s\n%s", x.v.out, strings.Join(firstN(x.v.notes, 50), "\n"))
	}

	// Every claim deleted, with kills again.
	var rest []*chaosClaim
	for _, c := range order {
		if c.live {
			rest = append(rest, c)
		}
	}
	x.v.enter("deleting the rest")
	start = time.Now()
	at = x.load(rng, (kills+2)/3, rest, func(c *chaosClaim) {
		if x.deleteClaim(c) {
			x.waitGone(c)
		}
	})
	t.Logf("deleted the other %d claims in %s with %d kill -9s at %v", len(rest), time.Since(start).Round(time.Millisecond), len(at), at)
	for _, c := range x.claims {
		c.live = false
	}
	x.v.enter("at the end")
	x.check()
	t.Logf("end: verdict %s", x.v.out)

	if x.v.out != converged {
		t.Errorf("%s:\n%s", x.v.out, strings.Join(firstN(x.v.notes, 50), "\n"))
	}
}

// newClaimsChaos makes the run's namespace, a StorageClass per reclaim
// policy naming a provisioner of the run's own, and the controller process
// (not started).
func newClaimsChaos(ctx context.Context, t *testing.T, api *harness.APIServer, kubeconfig string) *claimsChaos {
	ns, err := api.Namespace(ctx, "claims-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	provisioner := ns + ".crash.bucketbroker.io/bucket"
	x := &claimsChaos{ctx: ctx, k8s: api.Client, v: &chaosVerdict{out: converged}, ns: ns, classes: map[bool]string{},
		ctl: harness.NewController(t, binary, kubeconfig, provisioner), foreign: "foreign-" + ns}
	for _, retain := range []bool{false, true} {
		policy := corev1.PersistentVolumeReclaimDelete
		if retain {
			policy = corev1.PersistentVolumeReclaimRetain
		}
		class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + strings.ToLower(string(policy))},
			Provisioner: provisioner, ReclaimPolicy: &policy}
		if err := api.Client.Create(ctx, class); err != nil {
			t.Fatalf("create storage class: %v", err)
		}
		t.Cleanup(func() { _ = api.Client.Delete(context.Background(), class) })
		x.classes[retain] = class.Name
	}
	return x
}

// census counts the claims by fate, naming and reclaim policy, for the log.
func (x *claimsChaos) census() string {
	var fates, namings, policies []string
	count := map[string]int{}
	for _, c := range x.claims {
		for _, k := range []struct {
			list *[]string
			key  string
		}{{&fates, string(c.fate)}, {&namings, string(c.naming)}, {&policies, c.policy()}} {
			if count[k.key] == 0 {
				*k.list = append(*k.list, k.key)
			}
			count[k.key]++
		}
	}
	var groups []string
	for _, list := range [][]string{fates, namings, policies} {
		var parts []string
		for _, k := range list {
			parts = append(parts, fmt.Sprintf("%s %d", k, count[k]))
		}
		groups = append(groups, strings.Join(parts, ", "))
	}
	return strings.Join(groups, "; ")
}

// load runs script on every claim of order, claimsChaosClients at once,
// and meanwhile kills the controller kills times: each kill at a random
// point of the order (so that the kills are spread over the load however
// fast it runs) plus a random delay, followed at once by a start on the
// same data dir. It returns when every script has ended, with the moments
// of the kills.
func (x *claimsChaos) load(rng *rand.Rand, kills int, order []*chaosClaim, script func(*chaosClaim)) []time.Duration {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		done = make(chan struct{})
	)
	start := time.Now()
	for range claimsChaosClients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(order) || x.ctx.Err() != nil {
					return
				}
				script(order[i])
			}
		})
	}
	go func() { wg.Wait(); close(done) }()

	points := rng.Perm(len(order))[:min(kills, len(order))]
	slices.Sort(points)
	var at []time.Duration
	for _, p := range points {
		for int(next.Load()) < p {
			select {
			case <-done:
			case <-time.After(5 * time.Millisecond):
				continue
			}
			break
		}
		select {
		case <-done:
		case <-time.After(time.Duration(rng.Int64N(int64(claimsChaosMaxDelay)))):
			at = append(at, time.Since(start).Round(time.Millisecond))
			x.mu.Lock()
			x.kills = append(x.kills, time.Now())
			x.mu.Unlock()
			x.ctl.Kill()
			if err := x.ctl.TryStart(); err != nil {
				x.v.mark(broken, "start after kill -9: %v", err)
				x.stop()
				<-done
				return at
			}
			continue
		}
		break
	}
	<-done
	return at
}

// script creates the claim and does with it what its fate says.
func (x *claimsChaos) script(c *chaosClaim) {
	obc := &obv1.ObjectBucketClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: x.ns, Name: c.name},
		Spec: obv1.ObjectBucketClaimSpec{StorageClassName: x.classes[c.retain],
			GenerateBucketName: c.genPrefix, BucketName: c.exact},
	}
	if err := x.k8s.Create(x.ctx, obc); err != nil {
		x.v.mark(broken, "create claim %s: %v", c.name, err)
		return
	}
	c.uid, c.created = obc.UID, time.Now()
	switch c.fate {
	case fateLive:
		x.waitBound(c)
	case fateDeleteSoon:
		time.Sleep(c.deleteAfter)
		if x.deleteClaim(c) {
			x.waitGone(c)
		}
	case fateDeleteBound:
		if x.waitBound(c) && x.readSecret(c) && x.deleteClaim(c) {
			x.waitGone(c)
		}
	case fateDrift:
		if x.waitBound(c) && x.readSecret(c) {
			x.drift(c)
		}
	}
}

func (x *claimsChaos) key(c *chaosClaim) client.ObjectKey {
	return client.ObjectKey{Namespace: x.ns, Name: c.name}
}

// waitBound waits for the claim's phase Bound: Failed is lost, neither
// within claimsChaosWait is stuck.
func (x *claimsChaos) waitBound(c *chaosClaim) bool {
	deadline := time.Now().Add(claimsChaosWait)
	var last string
	for time.Now().Before(deadline) && x.ctx.Err() == nil {
		obc := &obv1.ObjectBucketClaim{}
		err := x.k8s.Get(x.ctx, x.key(c), obc)
		switch {
		case err != nil:
			last = err.Error()
		case obc.Status.Phase == obv1.PhaseBound:
			c.everBound, c.bucket = true, obc.Annotations[objectbucket.AnnotationBucketName]
			return true
		case obc.Status.Phase == obv1.PhaseFailed:
			x.v.mark(lost, "claim %s (%s, %s) Failed: %s", c.name, c.naming, c.policy(), conditions(obc))
			return false
		default:
			last = fmt.Sprintf("phase %q, %s", obc.Status.Phase, conditions(obc))
		}
		time.Sleep(claimsChaosPoll)
	}
	if x.ctx.Err() != nil {
		return false
	}
	x.v.mark(stuck, "claim %s (%s, %s) not Bound within %s: %s", c.name, c.naming, c.policy(), claimsChaosWait, last)
	return false
}

// readSecret reads the Bound claim's keys from its Secret.
func (x *claimsChaos) readSecret(c *chaosClaim) bool {
	sec := &corev1.Secret{}
	if err := x.k8s.Get(x.ctx, x.key(c), sec); err != nil {
		x.v.mark(lost, "the Secret of Bound claim %s: %v", c.name, err)
		return false
	}
	c.ak, c.sk = string(sec.Data[objectbucket.KeyAccessKeyID]), string(sec.Data[objectbucket.KeySecretAccessKey])
	if c.ak == "" || c.sk == "" {
		x.v.mark(lost, "the Secret of Bound claim %s holds no keys", c.name)
		return false
	}
	return true
}

func (x *claimsChaos) deleteClaim(c *chaosClaim) bool {
	obc := &obv1.ObjectBucketClaim{ObjectMeta: metav1.ObjectMeta{Namespace: x.ns, Name: c.name}}
	c.deleting = time.Now()
	if err := x.k8s.Delete(x.ctx, obc, client.Preconditions{UID: &c.uid}); err != nil {
		x.v.mark(broken, "delete claim %s: %v", c.name, err)
		return false
	}
	return true
}

// waitGone waits until the API server says the claim is gone; one still
// there after claimsChaosWait (a finalizer never removed) is stuck.
func (x *claimsChaos) waitGone(c *chaosClaim) {
	deadline := time.Now().Add(claimsChaosWait)
	var last string
	for time.Now().Before(deadline) && x.ctx.Err() == nil {
		obc := &obv1.ObjectBucketClaim{}
		err := x.k8s.Get(x.ctx, x.key(c), obc)
		switch {
		case apierrors.IsNotFound(err):
			c.goneAt = time.Now()
			return
		case err != nil:
			last = err.Error()
		default:
			last = fmt.Sprintf("finalizers %v, phase %q, %s", obc.Finalizers, obc.Status.Phase, conditions(obc))
		}
		time.Sleep(claimsChaosPoll)
	}
	if x.ctx.Err() != nil {
		return
	}
	x.v.mark(stuck, "claim %s (%s, %s, %s) not gone within %s: %s", c.name, c.fate, c.naming, c.policy(), claimsChaosWait, last)
}

// drift deletes the Bound claim's Secret, as a user might, and waits for
// the controller to write it again: a new object (a new UID) with the same
// keys, which only the deleted Secret held. A new key instead is lost (the
// applications that read the old Secret are locked out); the note says
// when the Secret was gone and which kills fell between its deletion and
// its return.
func (x *claimsChaos) drift(c *chaosClaim) {
	old := &corev1.Secret{}
	if err := x.k8s.Get(x.ctx, x.key(c), old); err != nil {
		x.v.mark(broken, "get the Secret of %s: %v", c.name, err)
		return
	}
	uid := old.UID
	deleted := time.Now()
	if err := x.k8s.Delete(x.ctx, old, client.Preconditions{UID: &uid}); err != nil {
		x.v.mark(broken, "delete the Secret of %s: %v", c.name, err)
		return
	}
	deadline := time.Now().Add(claimsChaosWait)
	var (
		last   string
		goneAt time.Time // first seen not found
	)
	for time.Now().Before(deadline) && x.ctx.Err() == nil {
		sec := &corev1.Secret{}
		err := x.k8s.Get(x.ctx, x.key(c), sec)
		switch {
		case apierrors.IsNotFound(err):
			last = "not found"
			if goneAt.IsZero() {
				goneAt = time.Now()
			}
		case err != nil:
			last = err.Error()
		case sec.UID == uid:
			last = fmt.Sprintf("the deleted Secret, finalizers %v", sec.Finalizers)
		case !sec.DeletionTimestamp.IsZero():
			last = "a new Secret, being deleted"
		default:
			ak, sk := string(sec.Data[objectbucket.KeyAccessKeyID]), string(sec.Data[objectbucket.KeySecretAccessKey])
			if ak == c.ak && sk == c.sk {
				return
			}
			gone := "never seen gone"
			if !goneAt.IsZero() {
				gone = fmt.Sprintf("seen gone %s after", goneAt.Sub(deleted).Round(time.Millisecond))
			}
			x.v.mark(lost, "the deleted Secret of claim %s came back with key %s, it held %s (which still authenticates: %v); deleted at %s, %s, back %s after; kill -9s in between at %v",
				c.name, ak, c.ak, x.ctl.Backend.Authenticates(c.ak, c.sk), deleted.Format("15:04:05.000"), gone,
				time.Since(deleted).Round(time.Millisecond), x.killsIn(deleted, time.Now()))
			c.ak, c.sk = ak, sk // the later checks check the new key
			return
		}
		time.Sleep(claimsChaosPoll)
	}
	if x.ctx.Err() != nil {
		return
	}
	x.v.mark(stuck, "the deleted Secret of %s not back within %s: %s", c.name, claimsChaosWait, last)
}

// killsIn lists the kills between from and to, as clock times.
func (x *claimsChaos) killsIn(from, to time.Time) []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	var in []string
	for _, k := range x.kills {
		if !k.Before(from) && !k.After(to) {
			in = append(in, k.Format("15:04:05.000"))
		}
	}
	return in
}

// story says when a deleted claim was created, deleted and gone, and
// which kills fell in between, for a note on what it left.
func (x *claimsChaos) story(c *chaosClaim) string {
	if c.goneAt.IsZero() {
		return fmt.Sprintf("%s, %s, %s, created %s", c.fate, c.naming, c.policy(), c.created.Format("15:04:05.000"))
	}
	return fmt.Sprintf("%s, %s, %s: created %s, deleted %s later, gone %s after that; kill -9s meanwhile at %v",
		c.fate, c.naming, c.policy(), c.created.Format("15:04:05.000"), c.deleting.Sub(c.created).Round(time.Millisecond),
		c.goneAt.Sub(c.deleting).Round(time.Millisecond), x.killsIn(c.created, c.goneAt))
}

// check compares the cluster and the backend with what the scripts
// decided (chaosClaim.live): every live claim Bound with its ObjectBucket,
// Secret, ConfigMap, bucket and one key, which works in its bucket and
// nowhere else; every other claim gone with nothing left, its bucket kept
// only under Retain; nothing that no claim explains.
func (x *claimsChaos) check() {
	live := map[types.UID]*chaosClaim{}
	var liveList []*chaosClaim
	for _, c := range x.claims {
		if c.live {
			live[c.uid] = c
			liveList = append(liveList, c)
			x.checkLiveClaim(c)
			continue
		}
		switch err := x.k8s.Get(x.ctx, x.key(c), &obv1.ObjectBucketClaim{}); {
		case err == nil:
			x.v.mark(stuck, "deleted claim %s is still there (%s)", c.name, x.story(c))
		case !apierrors.IsNotFound(err):
			x.v.mark(broken, "get claim %s: %v", c.name, err)
		}
	}
	x.checkObjects(live)
	x.checkBackend(live)
	x.checkKeys(liveList)
}

// checkLiveClaim checks a claim that should exist: Bound and Ready, its
// spec.objectBucketName and bucket name, its Secret (read into c) and its
// ConfigMap.
func (x *claimsChaos) checkLiveClaim(c *chaosClaim) {
	obc := &obv1.ObjectBucketClaim{}
	if err := x.k8s.Get(x.ctx, x.key(c), obc); err != nil {
		x.v.mark(lost, "live claim %s: %v", c.name, err)
		return
	}
	if obc.Status.Phase != obv1.PhaseBound {
		x.v.mark(stuck, "live claim %s: phase %q, %s", c.name, obc.Status.Phase, conditions(obc))
	}
	if !ready(obc) {
		x.v.mark(lost, "live claim %s is not Ready: %s", c.name, conditions(obc))
	}
	if want := objectbucket.NameForClaim(c.uid); obc.Spec.ObjectBucketName != want {
		x.v.mark(lost, "claim %s: spec.objectBucketName %q, want %q", c.name, obc.Spec.ObjectBucketName, want)
	}
	bucket := obc.Annotations[objectbucket.AnnotationBucketName]
	if !c.ownsBucket(bucket) {
		x.v.mark(lost, "claim %s (%s): bucket %q is not the name it asked for", c.name, c.naming, bucket)
	}
	if c.bucket != "" && bucket != c.bucket {
		x.v.mark(lost, "claim %s: bucket %q, %q when it was first Bound", c.name, bucket, c.bucket)
	}
	c.bucket = bucket

	sec := &corev1.Secret{}
	if err := x.k8s.Get(x.ctx, x.key(c), sec); err != nil {
		x.v.mark(lost, "the Secret of claim %s: %v", c.name, err)
	} else {
		if !metav1.IsControlledBy(sec, obc) || !sec.DeletionTimestamp.IsZero() {
			x.v.mark(lost, "the Secret of claim %s: owners %v, deletion %v", c.name, sec.OwnerReferences, sec.DeletionTimestamp)
		}
		ak, sk := string(sec.Data[objectbucket.KeyAccessKeyID]), string(sec.Data[objectbucket.KeySecretAccessKey])
		if c.ak != "" && (ak != c.ak || sk != c.sk) {
			x.v.mark(lost, "the Secret of claim %s holds key %s, it held %s before", c.name, ak, c.ak)
		}
		c.ak, c.sk = ak, sk
	}
	cm := &corev1.ConfigMap{}
	if err := x.k8s.Get(x.ctx, x.key(c), cm); err != nil {
		x.v.mark(lost, "the ConfigMap of claim %s: %v", c.name, err)
	} else if got := cm.Data[objectbucket.KeyBucketHost] + ":" + cm.Data[objectbucket.KeyBucketPort]; cm.Data[objectbucket.KeyBucketName] != bucket || got != x.ctl.S3Addr() {
		x.v.mark(lost, "the ConfigMap of claim %s says bucket %q at %s, want %q at %s", c.name, cm.Data[objectbucket.KeyBucketName], got, bucket, x.ctl.S3Addr())
	}
}

// checkObjects checks the ObjectBuckets bound to the run's namespace and
// the Secrets and ConfigMaps in it: exactly one of each per live claim,
// and none of another claim (but a deleted claim's ConfigMap left to the
// garbage collector: leftToCollector).
func (x *claimsChaos) checkObjects(live map[types.UID]*chaosClaim) {
	var obs obv1.ObjectBucketList
	if err := x.k8s.List(x.ctx, &obs); err != nil {
		x.v.mark(broken, "list object buckets: %v", err)
		return
	}
	seen := map[types.UID]int{}
	for _, ob := range obs.Items {
		uid := boundTo(&ob)
		ns, name, _ := strings.Cut(ob.Annotations[objectbucket.AnnotationClaim], "/")
		if uid == "" || ns != x.ns {
			continue
		}
		c, ok := live[uid]
		if !ok {
			story := "not the test's"
			if i := slices.IndexFunc(x.claims, func(c *chaosClaim) bool { return c.uid == uid }); i >= 0 {
				story = x.story(x.claims[i])
			}
			x.v.mark(leaked, "ObjectBucket %s (phase %q, finalizers %v) of claim %s, which is gone (%s)", ob.Name, ob.Status.Phase, ob.Finalizers, name, story)
			continue
		}
		seen[uid]++
		if ob.Name != objectbucket.NameForClaim(c.uid) || ob.Status.Phase != obv1.PhaseBound ||
			ob.Spec.Endpoint == nil || ob.Spec.Endpoint.BucketName != c.bucket {
			x.v.mark(lost, "ObjectBucket %s of claim %s: phase %q, endpoint %+v; want Bound, bucket %s", ob.Name, c.name, ob.Status.Phase, ob.Spec.Endpoint, c.bucket)
		}
	}
	for uid, c := range live {
		switch seen[uid] {
		case 0:
			x.v.mark(lost, "no ObjectBucket carries the UID of claim %s", c.name)
		case 1:
		default:
			x.v.mark(leaked, "%d ObjectBuckets carry the UID of claim %s", seen[uid], c.name)
		}
	}

	byName := map[string]*chaosClaim{}
	for _, c := range live {
		byName[c.name] = c
	}
	var secs corev1.SecretList
	var cms corev1.ConfigMapList
	for _, list := range []client.ObjectList{&secs, &cms} {
		if err := x.k8s.List(x.ctx, list, client.InNamespace(x.ns)); err != nil {
			x.v.mark(broken, "list %T: %v", list, err)
			return
		}
	}
	var objs []client.Object
	for i := range secs.Items {
		objs = append(objs, &secs.Items[i])
	}
	for i := range cms.Items {
		objs = append(objs, &cms.Items[i])
	}
	for _, obj := range objs {
		if ref := metav1.GetControllerOf(obj); ref != nil && live[ref.UID] == nil && leftToCollector(obj, ref.UID) {
			continue // a deleted claim's ConfigMap, the garbage collector's
		}
		if _, ok := byName[obj.GetName()]; !ok {
			story := "not the test's"
			if i := slices.IndexFunc(x.claims, func(c *chaosClaim) bool { return c.name == obj.GetName() }); i >= 0 {
				story = x.story(x.claims[i])
			}
			x.v.mark(leaked, "%T %s (finalizers %v) left, no live claim of that name (%s)", obj, obj.GetName(), obj.GetFinalizers(), story)
		}
	}
}

// checkBackend lists every bucket and every user of the controller's and
// matches them with the claims: a live claim's bucket and user, with
// exactly the Secret's key; a bucket of a deleted claim under Retain (one
// it had when Bound must be there); nothing else.
func (x *claimsChaos) checkBackend(live map[types.UID]*chaosClaim) {
	all := x.ctl.Backend
	all.Prefix = "" // generated and exact bucket names do not start with bb-
	buckets, err := all.Buckets()
	if err != nil {
		x.v.mark(broken, "%v", err)
		return
	}
	users, err := x.ctl.Backend.Keys()
	if err != nil {
		x.v.mark(broken, "%v", err)
		return
	}
	owned := map[*chaosClaim][]string{}
	for _, b := range buckets {
		if b == x.foreign {
			continue
		}
		i := slices.IndexFunc(x.claims, func(c *chaosClaim) bool { return c.ownsBucket(b) })
		if i < 0 {
			x.v.mark(leaked, "bucket %s: no claim's", b)
			continue
		}
		c := x.claims[i]
		owned[c] = append(owned[c], b)
		switch {
		case c.live && b != c.bucket:
			x.v.mark(leaked, "bucket %s of claim %s, which is bound to %s", b, c.name, c.bucket)
		case !c.live && !c.retain:
			x.v.mark(leaked, "bucket %s of claim %s left after its deletion (%s)", b, c.name, x.story(c))
		}
	}
	for _, c := range x.claims {
		switch got := owned[c]; {
		case len(got) > 1:
			x.v.mark(leaked, "claim %s (%s, %s) has buckets %v", c.name, c.naming, c.policy(), got)
		case len(got) == 0 && (c.live || c.retain && c.everBound):
			x.v.mark(lost, "claim %s (%s, %s, %s): bucket %s missing", c.name, c.fate, c.naming, c.policy(), c.bucket)
		}
	}
	switch ok, err := x.ctl.Backend.BucketExists(x.foreign); {
	case err != nil:
		x.v.mark(broken, "%v", err)
	case !ok:
		x.v.mark(lost, "bucket %s, never a claim's, is gone", x.foreign)
	}

	userOf := map[string]*chaosClaim{}
	for _, c := range x.claims {
		if c.uid != "" {
			userOf[c.user()] = c
		}
	}
	for u, keys := range users {
		c, ok := userOf[u]
		switch {
		case !ok:
			x.v.mark(leaked, "backend user %s (keys %v): no claim's", u, keys)
		case !c.live:
			x.v.mark(leaked, "backend user %s (keys %v) of claim %s left after its deletion (%s)", u, keys, c.name, x.story(c))
		case len(keys) > 1:
			x.v.mark(leaked, "user %s of claim %s has keys %v, want only the Secret's %s", u, c.name, keys, c.ak)
		case !slices.Contains(keys, c.ak):
			x.v.mark(lost, "user %s of claim %s has keys %v, not the Secret's %s", u, c.name, keys, c.ak)
		}
	}
	for _, c := range live {
		if _, ok := users[c.user()]; !ok {
			x.v.mark(lost, "no backend user %s for claim %s", c.user(), c.name)
		}
	}
}

// checkKeys uses the keys: a live claim's read and write its bucket and
// are refused by the foreign bucket and by another claim's; a deleted
// claim's no longer authenticate.
func (x *claimsChaos) checkKeys(live []*chaosClaim) {
	var (
		sem = make(chan struct{}, 8) // S3 clients at once
		wg  sync.WaitGroup
	)
	be := x.ctl.Backend
	for i, c := range live {
		if c.ak == "" || c.sk == "" {
			x.v.mark(lost, "the Secret of claim %s holds no keys", c.name)
			continue
		}
		others := []string{x.foreign}
		if len(live) > 1 {
			others = append(others, live[(i+1)%len(live)].bucket)
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := be.ReadWrite(c.ak, c.sk, c.bucket); err != nil {
				x.v.mark(lost, "the keys of claim %s do not work in its bucket: %v", c.name, err)
			}
			for _, b := range others {
				switch denied, err := be.Denied(c.ak, c.sk, b); {
				case err != nil:
					x.v.mark(broken, "write into %s with the keys of claim %s: %v", b, c.name, err)
				case !denied:
					x.v.mark(leaked, "the keys of claim %s write into %s, a bucket that is not its own", c.name, b)
				}
			}
		})
	}
	for _, c := range x.claims {
		if c.live || c.ak == "" {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if be.Authenticates(c.ak, c.sk) {
				x.v.mark(leaked, "the key %s of deleted claim %s still authenticates", c.ak, c.name)
			}
		})
	}
	wg.Wait()
}
