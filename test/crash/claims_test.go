package crash

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	obv1 "github.com/bucketbroker/bucketbroker/api/objectbucket/v1alpha1"
	"github.com/bucketbroker/bucketbroker/internal/crashpoint"
	"github.com/bucketbroker/bucketbroker/internal/objectbucket"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

// claimDeletionPoints are the claim crash points a claim's deletion passes;
// claimRepairPoints those the repair of its deleted Secret passes (the
// Secret's keys stashed, the terminating Secret released); provisioning
// passes the others.
var (
	claimDeletionPoints = map[crashpoint.Point]bool{
		crashpoint.ClaimCredentialRevoked: true,
		crashpoint.ClaimBucketDeleted:     true,
		crashpoint.ClaimObjectsDeleted:    true,
	}
	claimRepairPoints = map[crashpoint.Point]bool{
		crashpoint.ClaimKeysStashed:    true,
		crashpoint.ClaimSecretReleased: true,
	}
)

const (
	// claimWait bounds each wait of a claim cell: for the crash, for Bound,
	// for the claim to be gone. Past it the cell is stuck (or broken). A
	// whole cell takes 1-3 s; the bound keeps ten stuck cells, two at a
	// time, within minutes.
	claimWait = 30 * time.Second
	// claimParallel is how many cells run at once: each is a controller
	// process with its own embedded S3 server, on 2 shared cores.
	claimParallel = 2
)

// The API server is shared by the claim tests of one run: starting etcd and
// kube-apiserver costs seconds. Each cell has its own namespace,
// StorageClass, provisioner name and controller data dir.
var claimCluster struct {
	once       sync.Once
	api        *harness.APIServer
	kubeconfig string
	dir        string
	err        error
	// crds is the objectbucket.io CRD set the API server has
	// (BUCKETBROKER_TEST_CRDS, harness.CRDVariant).
	crds string
}

// ready reports whether a Bound claim is Ready as its CRD set lets it say:
// its Ready condition is True, or, on a set that prunes conditions
// (NooBaa's), it is Bound.
func ready(c *obv1.ObjectBucketClaim) bool {
	if harness.PrunesStatus(claimCluster.crds) {
		return c.Status.Phase == obv1.PhaseBound && len(c.Status.Conditions) == 0
	}
	rd := meta.FindStatusCondition(c.Status.Conditions, obv1.ConditionReady)
	return rd != nil && rd.Status == metav1.ConditionTrue
}

// boundTo returns the UID of the claim ob is bound to, by its label: the
// binding no CRD set prunes (spec.claimRef is pruned by NooBaa's).
func boundTo(ob *obv1.ObjectBucket) types.UID {
	return types.UID(ob.Labels[objectbucket.LabelClaimUID])
}

// claimAPIServer returns the run's API server and the kubeconfig of a user
// holding only the controller's ClusterRole, starting them on first use.
// Without KUBEBUILDER_ASSETS the test is skipped, except on CI.
func claimAPIServer(t *testing.T) (*harness.APIServer, string) {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		const msg = "KUBEBUILDER_ASSETS is unset; run: export KUBEBUILDER_ASSETS=$(hack/envtest-assets.sh | tail -n 1)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " (CI must run the API server tests, never skip them)")
		}
		t.Skip(msg)
	}
	cl := &claimCluster
	cl.once.Do(func() {
		root, err := filepath.Abs(filepath.Join("..", ".."))
		if err != nil {
			cl.err = err
			return
		}
		if cl.dir, cl.err = os.MkdirTemp("", "bucketbroker-claims-"); cl.err != nil {
			return
		}
		if cl.crds, _, cl.err = harness.CRDVariant(root); cl.err != nil {
			return
		}
		if cl.api, cl.err = harness.StartAPIServer(assets, root); cl.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cl.kubeconfig = filepath.Join(cl.dir, "kubeconfig")
		cl.err = cl.api.ControllerKubeconfig(ctx, root, "bucketbroker-controller", cl.kubeconfig)
	})
	if cl.err != nil {
		t.Fatalf("API server for the controller: %v", cl.err)
	}
	return cl.api, cl.kubeconfig
}

// stopClaimAPIServer stops the API server if a test started it (TestMain).
func stopClaimAPIServer() {
	cl := &claimCluster
	if cl.api != nil {
		if err := cl.api.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop envtest: %v\n", err)
		}
	}
	if cl.dir != "" {
		os.RemoveAll(cl.dir)
	}
}

// TestClaimCrashPoints kills `bucketbroker controller` at every claim crash
// point: a provisioning point while a new claim is provisioned, a repair
// point while the Secret of a bound claim, deleted by someone, is made
// again with its keys, a deletion point while a bound claim is deleted. The
// process is started again on the same data dir, and the cell checks what
// the cluster and the backend end up with: one bucket, one ObjectBucket
// with the claim's UID, one live key (the Secret's, which works in its
// bucket and nowhere else; after a repair the same key as before), and
// after the claim's deletion nothing of it left and no finalizer stuck. It
// prints the table and fails on any cell that did not converge.
func TestClaimCrashPoints(t *testing.T) {
	api, kubeconfig := claimAPIServer(t)
	t.Logf("envtest started in %s", api.StartedIn.Round(time.Millisecond))
	var (
		mu      sync.Mutex
		results = map[crashpoint.Point]result{}
		slots   = make(chan struct{}, claimParallel)
	)
	start := time.Now()
	t.Run("points", func(t *testing.T) {
		for _, p := range crashpoint.ClaimPoints {
			t.Run(claimSlug(p), func(t *testing.T) {
				t.Parallel()
				slots <- struct{}{}
				defer func() { <-slots }()
				r := runClaimCell(t, api, kubeconfig, p)
				mu.Lock()
				results[p] = r
				mu.Unlock()
				if r.outcome != converged {
					t.Errorf("%s: %s\n%s", p, r.outcome, strings.Join(r.notes, "\n"))
				}
			})
		}
	})
	t.Logf("claim crash points, %d cells in %s:\n%s", len(crashpoint.ClaimPoints), time.Since(start).Round(time.Second), claimTable(results))
}

// claimSlug names a cell's subtest, StorageClass, provisioner and foreign
// bucket after its point: "claim/" dropped, and the slash of a driver's
// point ("bucket/created-unmarked"), which none of those names may hold,
// made a hyphen.
func claimSlug(point crashpoint.Point) string {
	return strings.ReplaceAll(strings.TrimPrefix(string(point), "claim/"), "/", "-")
}

func claimTable(results map[crashpoint.Point]result) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "| %-26s | %-12s | %-9s | %-5s |\n", "crash point", "passed by", "outcome", "took")
	fmt.Fprintf(&sb, "|%s|%s|%s|%s|\n", strings.Repeat("-", 28), strings.Repeat("-", 14), strings.Repeat("-", 11), strings.Repeat("-", 7))
	for _, p := range crashpoint.ClaimPoints {
		by := "provisioning"
		switch {
		case claimDeletionPoints[p]:
			by = "deletion"
		case claimRepairPoints[p]:
			by = "repair"
		}
		out, took := "not run", "-"
		if r, ok := results[p]; ok {
			out, took = string(r.outcome), fmt.Sprintf("%.1fs", r.took.Seconds())
		}
		fmt.Fprintf(&sb, "| %-26s | %-12s | %-9s | %-5s |\n", p, by, out, took)
	}
	return sb.String()
}

// claimRun is one claim cell in progress: the controller, the claim and
// what it was given, and the verdict so far (the outcomes of the broker's
// table).
type claimRun struct {
	t     *testing.T
	point crashpoint.Point // armed in the first run; empty for none
	k8s   client.Client
	ctl   *harness.Controller
	ctx   context.Context
	wait  time.Duration
	out   outcome
	notes []string

	ns, name, class string
	uid             types.UID
	// bucket and the Secret's keys, once Bound.
	bucket, ak, sk string
	// secretUID is the Secret a repair cell deleted.
	secretUID types.UID
	// foreign is a bucket the controller did not make: the claim's keys
	// must not reach it, and it must survive the claim.
	foreign string
	// laps says how long each wait took, for the log; lap("") starts
	// the next one.
	laps   []string
	lapped time.Time
}

func (r *claimRun) lap(what string) {
	now := time.Now()
	if what != "" && !r.lapped.IsZero() {
		r.laps = append(r.laps, fmt.Sprintf("%s %.1fs", what, now.Sub(r.lapped).Seconds()))
	}
	r.lapped = now
}

func (r *claimRun) mark(o outcome, format string, args ...any) {
	if severity[o] > severity[r.out] {
		r.out = o
	}
	r.notes = append(r.notes, fmt.Sprintf("%s: ", o)+fmt.Sprintf(format, args...))
}

func (r *claimRun) ok() bool { return r.out == converged }

// newClaimRun starts nothing: it makes the cell's namespace, a StorageClass
// naming the cell's own provisioner (so that cells running at once never
// serve each other's claims) and the controller process, not started.
func newClaimRun(t *testing.T, api *harness.APIServer, kubeconfig, slug string) *claimRun {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	t.Cleanup(cancel)
	ns, err := api.Namespace(ctx, "claim-crash-")
	if err != nil {
		t.Fatal(err)
	}
	provisioner := slug + ".crash.bucketbroker.io/bucket"
	reclaim := corev1.PersistentVolumeReclaimDelete
	class := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "crash-" + slug}, Provisioner: provisioner, ReclaimPolicy: &reclaim}
	if err := api.Client.Create(ctx, class); err != nil {
		t.Fatalf("create storage class: %v", err)
	}
	return &claimRun{t: t, k8s: api.Client, ctl: harness.NewController(t, binary, kubeconfig, provisioner),
		ctx: ctx, wait: claimWait, out: converged, ns: ns, name: "app", class: class.Name, foreign: "foreign-" + slug}
}

func (r *claimRun) key() client.ObjectKey { return client.ObjectKey{Namespace: r.ns, Name: r.name} }

func runClaimCell(t *testing.T, api *harness.APIServer, kubeconfig string, point crashpoint.Point) result {
	start := time.Now()
	r := newClaimRun(t, api, kubeconfig, claimSlug(point))
	r.point = point
	deletion, repair := claimDeletionPoints[point], claimRepairPoints[point]
	// A deletion or repair point is armed from the start: provisioning
	// never passes it, and the same process then dies when the claim is
	// deleted, or its Secret is.
	if r.start(point) && r.foreignBucket() && r.createClaim() &&
		(deletion || repair || r.crashAndRestart()) && r.waitBound() {
		r.checkBound()
		if repair && (!r.deleteSecret() || !r.crashAndRestart() || !r.waitSecretRemade()) {
			r.ctl.Stop()
			return result{outcome: r.out, notes: r.notes, took: time.Since(start)}
		}
		if r.deleteClaim() && (!deletion || r.crashAndRestart()) && r.waitGone() {
			r.checkClean()
		}
	}
	r.ctl.Stop()
	t.Logf("claim %s/%s (uid %s): bucket %s, key %s; %s; %s", r.ns, r.name, r.uid, r.bucket, r.ak, r.out, strings.Join(r.laps, ", "))
	return result{outcome: r.out, notes: r.notes, took: time.Since(start)}
}

func (r *claimRun) start(crashAt ...crashpoint.Point) bool {
	r.lap("")
	if err := r.ctl.TryStart(pointNames(crashAt)...); err != nil {
		r.mark(broken, "%v", err)
		return false
	}
	r.lap("ready")
	return true
}

// crashAndRestart waits for the armed process to die at its point and
// starts it again, unarmed, on the same data dir.
func (r *claimRun) crashAndRestart() bool {
	if err := r.ctl.TryWaitCrash(r.wait); err != nil {
		r.mark(broken, "%v", err)
		return false
	}
	if !strings.Contains(r.ctl.Log(), "crashpoint: exiting at "+string(r.point)) {
		r.mark(broken, "the process exited %d without saying it reached %s", crashpoint.ExitCode, r.point)
		return false
	}
	r.lap("died")
	return r.start()
}

func (r *claimRun) foreignBucket() bool {
	if err := r.ctl.Backend.CreateBucket(r.foreign); err != nil {
		r.mark(broken, "create the foreign bucket: %v", err)
		return false
	}
	return true
}

func (r *claimRun) createClaim() bool {
	obc := &obv1.ObjectBucketClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: r.name},
		Spec:       obv1.ObjectBucketClaimSpec{StorageClassName: r.class},
	}
	if err := r.k8s.Create(r.ctx, obc); err != nil {
		r.mark(broken, "create claim: %v", err)
		return false
	}
	r.uid = obc.UID
	return true
}

func (r *claimRun) claim() (*obv1.ObjectBucketClaim, error) {
	c := &obv1.ObjectBucketClaim{}
	return c, r.k8s.Get(r.ctx, r.key(), c)
}

// waitBound waits for the claim's phase Bound: Failed is lost, neither
// within the deadline is stuck.
func (r *claimRun) waitBound() bool {
	deadline := time.Now().Add(r.wait)
	var last string
	for time.Now().Before(deadline) {
		c, err := r.claim()
		switch {
		case err != nil:
			last = err.Error()
		case c.Status.Phase == obv1.PhaseBound:
			r.lap("bound")
			return true
		case c.Status.Phase == obv1.PhaseFailed:
			r.mark(lost, "claim Failed: %s", conditions(c))
			return false
		default:
			last = fmt.Sprintf("phase %q, %s", c.Status.Phase, conditions(c))
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.mark(stuck, "claim not Bound within %s: %s", r.wait, last)
	return false
}

func conditions(c *obv1.ObjectBucketClaim) string {
	var parts []string
	for _, cd := range c.Status.Conditions {
		parts = append(parts, fmt.Sprintf("%s=%s (%s: %s)", cd.Type, cd.Status, cd.Reason, cd.Message))
	}
	return strings.Join(parts, "; ")
}

// objectBuckets lists the ObjectBuckets bound to the claim's UID.
func (r *claimRun) objectBuckets() ([]obv1.ObjectBucket, error) {
	var list obv1.ObjectBucketList
	if err := r.k8s.List(r.ctx, &list); err != nil {
		return nil, fmt.Errorf("list object buckets: %w", err)
	}
	var mine []obv1.ObjectBucket
	for _, ob := range list.Items {
		if boundTo(&ob) == r.uid {
			mine = append(mine, ob)
		}
	}
	return mine, nil
}

// checkBound checks a Bound claim: exactly one bucket, one ObjectBucket
// with the claim's UID, one backend user with one key, the Secret's, whose
// keys read and write the bucket and are refused by another one, and a
// ConfigMap naming the bucket and the endpoint.
func (r *claimRun) checkBound() {
	c, err := r.claim()
	if err != nil {
		r.mark(broken, "get claim: %v", err)
		return
	}
	r.bucket = c.Annotations[objectbucket.AnnotationBucketName]
	if r.bucket == "" {
		r.mark(lost, "the Bound claim names no bucket")
	}
	if !ready(c) {
		r.mark(lost, "the Bound claim is not Ready: %s", conditions(c))
	}
	if want := objectbucket.NameForClaim(r.uid); c.Spec.ObjectBucketName != want {
		r.mark(lost, "claim spec.objectBucketName %q, want %q", c.Spec.ObjectBucketName, want)
	}

	obs, err := r.objectBuckets()
	switch {
	case err != nil:
		r.mark(broken, "%v", err)
	case len(obs) == 0:
		r.mark(lost, "no ObjectBucket carries the claim's UID")
	case len(obs) > 1:
		r.mark(leaked, "%d ObjectBuckets carry the claim's UID", len(obs))
	default:
		ob := obs[0]
		if ob.Status.Phase != obv1.PhaseBound || ob.Spec.Endpoint == nil || ob.Spec.Endpoint.BucketName != r.bucket {
			r.mark(lost, "ObjectBucket %s: phase %q, endpoint %+v; want Bound, bucket %s", ob.Name, ob.Status.Phase, ob.Spec.Endpoint, r.bucket)
		}
	}

	r.expectBuckets(r.bucket)

	sec := &corev1.Secret{}
	if err := r.k8s.Get(r.ctx, r.key(), sec); err != nil {
		r.mark(lost, "the claim's Secret: %v", err)
	} else {
		if !metav1.IsControlledBy(sec, c) {
			r.mark(lost, "the Secret is not controlled by the claim: %v", sec.OwnerReferences)
		}
		r.ak, r.sk = string(sec.Data[objectbucket.KeyAccessKeyID]), string(sec.Data[objectbucket.KeySecretAccessKey])
	}
	cm := &corev1.ConfigMap{}
	if err := r.k8s.Get(r.ctx, r.key(), cm); err != nil {
		r.mark(lost, "the claim's ConfigMap: %v", err)
	} else if got := cm.Data[objectbucket.KeyBucketHost] + ":" + cm.Data[objectbucket.KeyBucketPort]; cm.Data[objectbucket.KeyBucketName] != r.bucket || got != r.ctl.S3Addr() {
		r.mark(lost, "ConfigMap says bucket %q at %s, want %q at %s", cm.Data[objectbucket.KeyBucketName], got, r.bucket, r.ctl.S3Addr())
	}

	r.expectKey(r.ak)
	r.checkKeys()
}

// checkKeys checks that the Secret's keys read and write the claim's
// bucket and are refused by a bucket that is not the claim's.
func (r *claimRun) checkKeys() {
	if r.ak == "" || r.sk == "" {
		r.mark(lost, "the Secret holds no keys")
		return
	}
	if err := r.ctl.Backend.ReadWrite(r.ak, r.sk, r.bucket); err != nil {
		r.mark(lost, "the Secret's keys do not work in the claim's bucket: %v", err)
	}
	switch denied, err := r.ctl.Backend.Denied(r.ak, r.sk, r.foreign); {
	case err != nil:
		r.mark(broken, "write into the foreign bucket: %v", err)
	case !denied:
		r.mark(leaked, "the Secret's keys write into %s, a bucket that is not the claim's", r.foreign)
	}
}

// expectBuckets checks the controller's buckets on the backend: exactly
// want, or none when want is empty.
func (r *claimRun) expectBuckets(want string) {
	got, err := r.ctl.Backend.Buckets()
	if err != nil {
		r.mark(broken, "%v", err)
		return
	}
	if want != "" && !slices.Contains(got, want) {
		r.mark(lost, "bucket %s missing (buckets %v)", want, got)
	}
	if extra := slices.DeleteFunc(got, func(b string) bool { return b == want }); len(extra) > 0 {
		r.mark(leaked, "buckets %v besides %q", extra, want)
	}
}

// expectKey checks the controller's users on the backend: exactly the
// claim's, holding exactly key; or none when key is empty.
func (r *claimRun) expectKey(key string) {
	users, err := r.ctl.Backend.Keys()
	if err != nil {
		r.mark(broken, "%v", err)
		return
	}
	user := driver.UserName(harness.ControllerPrefix, "claim", string(r.uid))
	for u, keys := range users {
		switch {
		case key == "" || u != user:
			r.mark(leaked, "backend user %s with keys %v left", u, keys)
		case len(keys) > 1:
			r.mark(leaked, "user %s has keys %v, want only the Secret's %s", u, keys, key)
		case !slices.Contains(keys, key):
			r.mark(lost, "user %s has keys %v, not the Secret's %s", u, keys, key)
		}
	}
	if _, ok := users[user]; key != "" && !ok {
		r.mark(lost, "no backend user %s for the claim", user)
	}
}

// deleteSecret deletes the bound claim's Secret, as someone cleaning up
// by hand would: the controller's finalizer holds it, terminating, until
// the controller has stashed its keys and made it again.
func (r *claimRun) deleteSecret() bool {
	r.lap("")
	sec := &corev1.Secret{}
	if err := r.k8s.Get(r.ctx, r.key(), sec); err != nil {
		r.mark(broken, "get the Secret to delete: %v", err)
		return false
	}
	r.secretUID = sec.UID
	if err := r.k8s.Delete(r.ctx, sec); err != nil {
		r.mark(broken, "delete the Secret: %v", err)
		return false
	}
	return true
}

// waitSecretRemade waits for the claim's Secret to be made again (a new
// UID, not terminating), then checks the claim as checkBound does and that
// the Secret holds the keys it held before: a repair makes no new key.
func (r *claimRun) waitSecretRemade() bool {
	deadline := time.Now().Add(r.wait)
	last := "not looked"
	for time.Now().Before(deadline) {
		sec := &corev1.Secret{}
		err := r.k8s.Get(r.ctx, r.key(), sec)
		switch {
		case err != nil:
			last = err.Error()
		case sec.UID == r.secretUID || sec.DeletionTimestamp != nil:
			last = fmt.Sprintf("the deleted Secret is still there (finalizers %v)", sec.Finalizers)
		default:
			r.lap("remade")
			ak, sk := r.ak, r.sk
			r.checkBound()
			if r.ak != ak || r.sk != sk {
				r.mark(lost, "the remade Secret holds key %s, not the key %s it held before", r.ak, ak)
			}
			return r.ok()
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.mark(stuck, "the deleted Secret not made again within %s: %s", r.wait, last)
	return false
}

func (r *claimRun) deleteClaim() bool {
	r.lap("")
	c := &obv1.ObjectBucketClaim{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: r.name}}
	if err := r.k8s.Delete(r.ctx, c, client.Preconditions{UID: &r.uid}); err != nil {
		r.mark(broken, "delete claim: %v", err)
		return false
	}
	return true
}

// waitGone waits until the API server says the claim is gone; a claim
// still there at the deadline (a finalizer never removed) is stuck.
func (r *claimRun) waitGone() bool {
	deadline := time.Now().Add(r.wait)
	var last string
	for time.Now().Before(deadline) {
		c, err := r.claim()
		switch {
		case apierrors.IsNotFound(err):
			r.lap("gone")
			return true
		case err != nil:
			last = err.Error()
		default:
			last = fmt.Sprintf("finalizers %v, phase %q, %s", c.Finalizers, c.Status.Phase, conditions(c))
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.mark(stuck, "claim not gone within %s: %s", r.wait, last)
	return false
}

// checkClean checks that a deleted claim left nothing: no ObjectBucket,
// Secret or ConfigMap (but one the garbage collector removes, which envtest
// does not run: leftToCollector), no bucket, user or working key on the backend; and
// that the bucket that was never the claim's is still there.
func (r *claimRun) checkClean() {
	switch obs, err := r.objectBuckets(); {
	case err != nil:
		r.mark(broken, "%v", err)
	case len(obs) > 0:
		r.mark(leaked, "%d ObjectBuckets of the deleted claim left (first %s, finalizers %v)", len(obs), obs[0].Name, obs[0].Finalizers)
	}
	for _, obj := range []client.Object{&corev1.Secret{}, &corev1.ConfigMap{}} {
		switch err := r.k8s.Get(r.ctx, r.key(), obj); {
		case err == nil && leftToCollector(obj, r.uid):
		case err == nil:
			r.mark(leaked, "%T of the deleted claim left (finalizers %v)", obj, obj.GetFinalizers())
		case !apierrors.IsNotFound(err):
			r.mark(broken, "get %T: %v", obj, err)
		}
	}
	r.expectBuckets("")
	r.expectKey("")
	if r.ak != "" && r.ctl.Backend.Authenticates(r.ak, r.sk) {
		r.mark(leaked, "the deleted claim's key %s still authenticates", r.ak)
	}
	switch ok, err := r.ctl.Backend.BucketExists(r.foreign); {
	case err != nil:
		r.mark(broken, "%v", err)
	case !ok:
		r.mark(lost, "bucket %s, never the claim's, is gone", r.foreign)
	}
}

// leftToCollector reports whether obj is a deleted claim's ConfigMap left
// for the garbage collector, as the controller leaves it: no finalizer, and
// the claim (uid) as its controller. envtest runs no garbage collector.
func leftToCollector(obj client.Object, uid types.UID) bool {
	_, isCM := obj.(*corev1.ConfigMap)
	ref := metav1.GetControllerOf(obj)
	return isCM && len(obj.GetFinalizers()) == 0 && ref != nil && ref.UID == uid
}
