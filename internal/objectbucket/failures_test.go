package objectbucket

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	obv1 "github.com/bucketbroker/bucketbroker/api/objectbucket/v1alpha1"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// TestPrunedObjectBucketNameProvisionsOnce is rook#6650 against the
// controller: under a CRD that prunes spec.objectBucketName, many passes and
// a restart still leave exactly one bucket, one ObjectBucket and one key.
func TestPrunedObjectBucketNameProvisionsOnce(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, k8s)
	base, variant := readCRD(t, claimCRDPath), readCRD(t, pruningCRD)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := swapClaimSchema(ctx, k8s, base, ns, true); err != nil {
			t.Errorf("restore the generated ObjectBucketClaim CRD: %v", err)
		}
	})
	if err := swapClaimSchema(ctx, k8s, variant, ns, false); err != nil {
		t.Fatalf("install the pruning CRD: %v", err)
	}
	drv := &hookDriver{Driver: backend.drv}
	prov := newProvisioner()
	run := startController(t, runOptions{provisioner: prov, drv: drv})
	class := storageClass(ctx, t, prov, corev1.PersistentVolumeReclaimDelete, nil)
	gen := "pruned-" + randomHex(4)
	obc := newClaim(ns, "pruned", class, func(s *obv1.ObjectBucketClaimSpec) { s.GenerateBucketName = gen })
	create(ctx, t, obc)
	got := waitPhase(ctx, t, obc, obv1.PhaseBound)
	if got.Spec.ObjectBucketName != "" {
		t.Fatalf("objectBucketName = %q: the CRD did not prune it, the test proves nothing", got.Spec.ObjectBucketName)
	}
	// Many more passes: each annotation change is an event for the claim.
	for i := range 10 {
		patchAnnotation(ctx, t, obc, "test/poke", fmt.Sprint(i))
	}
	time.Sleep(time.Second)
	run.stop()
	startController(t, runOptions{provisioner: prov, drv: drv})
	patchAnnotation(ctx, t, obc, "test/poke", "after-restart")
	time.Sleep(time.Second)
	waitPhase(ctx, t, obc, obv1.PhaseBound)

	if b := bucketsWithPrefix(ctx, t, gen); len(b) != 1 {
		t.Errorf("buckets %v, want exactly one", b)
	}
	if obs := objectBucketsOf(ctx, t, got); len(obs) != 1 {
		t.Errorf("object buckets %v, want exactly one", obs)
	}
	if k := keysOf(ctx, t, string(got.UID)); len(k) != 1 {
		t.Errorf("keys %v, want exactly one", k)
	}
	if n := drv.ensureBucketCalls.Load(); n != 1 {
		t.Errorf("EnsureBucket called %d times, want once (a bound claim makes no backend call, even after a restart)", n)
	}
	checkCredentials(ctx, t, readBinding(ctx, t, obc), "")
}

func patchAnnotation(ctx context.Context, t *testing.T, obj client.Object, k, v string) {
	t.Helper()
	p := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, k, v)
	if err := k8s.Patch(ctx, obj, client.RawPatch("application/merge-patch+json", []byte(p))); err != nil {
		t.Fatalf("patch annotation: %v", err)
	}
}

// TestCrashBetweenWrites stops the manager right after each named write and
// starts a new one: every claim converges to one bucket, one key, one
// ObjectBucket, and deletion converges to nothing left.
func TestCrashBetweenWrites(t *testing.T) {
	apiServer(t)
	provision := []string{"claim-patched", "objectbucket-created", "bucket-created", "key-created",
		"secret-written", "configmap-written", "objectbucket-bound"}
	deletion := []string{"credential-revoked", "bucket-deleted", "objects-deleted"}
	for _, point := range append(provision, deletion...) {
		t.Run(point, func(t *testing.T) {
			ctx := testContext(t)
			ns := namespace(ctx, t, k8s)
			prov := newProvisioner()
			class := storageClass(ctx, t, prov, corev1.PersistentVolumeReclaimDelete, nil)
			gen := "crash-" + randomHex(4)
			obc := newClaim(ns, "crash", class, func(s *obv1.ObjectBucketClaimSpec) { s.GenerateBucketName = gen })

			var first *controllerRun
			hook, crashed := crashHook(point, &first)
			isDeletion := contains(deletion, point)
			if isDeletion {
				run := startController(t, runOptions{provisioner: prov})
				create(ctx, t, obc)
				waitPhase(ctx, t, obc, obv1.PhaseBound)
				run.stop()
			}
			first = startController(t, runOptions{provisioner: prov, afterWrite: hook})
			if isDeletion {
				deleteObj(ctx, t, obc)
			} else {
				create(ctx, t, obc)
			}
			waitCrash(ctx, t, crashed, point)
			first.stop()
			startController(t, runOptions{provisioner: prov})

			if isDeletion {
				claim := getClaim(ctx, t, k8s, obc)
				waitGone(ctx, t, obc)
				if b := bucketsWithPrefix(ctx, t, gen); len(b) != 0 {
					t.Errorf("buckets %v left after deletion", b)
				}
				if obs := objectBucketsOf(ctx, t, claim); len(obs) != 0 {
					t.Errorf("object buckets %v left after deletion", obs)
				}
				if k := keysOf(ctx, t, string(claim.UID)); len(k) != 0 {
					t.Errorf("keys %v left after deletion", k)
				}
				return
			}
			got := waitPhase(ctx, t, obc, obv1.PhaseBound)
			b := readBinding(ctx, t, obc)
			if names := bucketsWithPrefix(ctx, t, gen); len(names) != 1 {
				t.Errorf("buckets %v, want exactly one", names)
			}
			if obs := objectBucketsOf(ctx, t, got); len(obs) != 1 {
				t.Errorf("object buckets %v, want exactly one", obs)
			}
			k := keysOf(ctx, t, string(got.UID))
			if diff := cmp.Diff([]string{string(b.secret.Data[KeyAccessKeyID])}, k); diff != "" {
				t.Errorf("live keys (-the Secret's +the backend's):\n%s", diff)
			}
			checkCredentials(ctx, t, b, "")
		})
	}
}

// TestCollidingNames: lib-bucket-provisioner names both of these claims'
// ObjectBuckets obc-<x>-b-c. Here each gets its own.
func TestCollidingNames(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	x := "col" + randomHex(3)
	for _, n := range []string{x + "-b", x} {
		create(ctx, t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	run := startController(t, runOptions{provisioner: newProvisioner()})
	class := storageClass(ctx, t, run.provisioner, corev1.PersistentVolumeReclaimDelete, nil)
	one := newClaim(x+"-b", "c", class, nil)
	two := newClaim(x, "b-c", class, nil)
	create(ctx, t, one)
	create(ctx, t, two)
	waitPhase(ctx, t, one, obv1.PhaseBound)
	waitPhase(ctx, t, two, obv1.PhaseBound)
	b1, b2 := readBinding(ctx, t, one), readBinding(ctx, t, two)
	if b1.ob.Name == b2.ob.Name || b1.bucket == b2.bucket || string(b1.secret.Data[KeyAccessKeyID]) == string(b2.secret.Data[KeyAccessKeyID]) {
		t.Errorf("claims share names: object buckets %s/%s, buckets %s/%s", b1.ob.Name, b2.ob.Name, b1.bucket, b2.bucket)
	}
	checkCredentials(ctx, t, b1, b2.bucket)
	checkCredentials(ctx, t, b2, b1.bucket)
}

// TestUserSecretNeverOverwritten: a Secret of the claim's name that the
// claim does not control is left as it is, the claim goes Failed, and no
// key is left that nobody could hold (the one made before the Create found
// the name taken is revoked with its user).
func TestUserSecretNeverOverwritten(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, k8s)
	drv := &hookDriver{Driver: backend.drv}
	run := startController(t, runOptions{provisioner: newProvisioner(), drv: drv})
	class := storageClass(ctx, t, run.provisioner, corev1.PersistentVolumeReclaimDelete, nil)
	mine := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, StringData: map[string]string{"password": "hunter2"}}
	create(ctx, t, mine)
	obc := newClaim(ns, "app", class, nil)
	create(ctx, t, obc)
	got := waitPhase(ctx, t, obc, obv1.PhaseFailed)
	wantProvisioned(t, got, ReasonSecretConflict)
	// Later passes of the blocked claim make no key to revoke again, on a
	// CRD whose status says why (the condition) and on one that keeps only
	// the phase (NooBaa's).
	for i := range 3 {
		patchAnnotation(ctx, t, obc, "test/poke", fmt.Sprint(i))
	}
	time.Sleep(time.Second) // the passes write nothing to wait for (as in TestPrunedObjectBucketNameProvisionsOnce)
	if n := drv.ensureCredCalls.Load(); n != 1 {
		t.Errorf("EnsureCredential called %d times, want once: a claim blocked by a user's Secret makes no key on later passes", n)
	}
	var after corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(mine), &after); err != nil {
		t.Fatal(err)
	}
	if string(after.Data["password"]) != "hunter2" || len(after.Data) != 1 || len(after.OwnerReferences) != 0 || len(after.Finalizers) != 0 {
		t.Errorf("the user's Secret was changed: data keys %v, owners %v, finalizers %v", keys(after.Data), after.OwnerReferences, after.Finalizers)
	}
	if k := keysOf(ctx, t, string(got.UID)); len(k) != 0 {
		t.Errorf("keys %v were made for a Secret that cannot be written", k)
	}
	// Deleting the claim leaves the user's Secret alone too.
	deleteObj(ctx, t, obc)
	waitGone(ctx, t, obc)
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(mine), &after); err != nil || string(after.Data["password"]) != "hunter2" {
		t.Errorf("the user's Secret after the claim was deleted: %v %v", err, keys(after.Data))
	}
}

// TestUnlabeledOwnSecret: a Secret the claim controls but that lacks the
// provisioner label (a user removed it) is invisible to the controller's
// cache. The Create that stands in for a look finds it, and it is taken
// back: labeled, given the key just made, and that key is the user's only
// one. Nothing is Failed, nothing is left over.
func TestUnlabeledOwnSecret(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, k8s)
	prov := newProvisioner()
	class := storageClass(ctx, t, prov, corev1.PersistentVolumeReclaimDelete, nil)
	obc := newClaim(ns, "app", class, nil)
	create(ctx, t, obc)
	isController := true
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: obv1.GroupVersion.String(), Kind: obv1.ObjectBucketClaimKind, Name: obc.Name, UID: obc.UID, Controller: &isController,
	}}}, StringData: map[string]string{KeyAccessKeyID: "AKIASTALE", KeySecretAccessKey: "stale"}}
	create(ctx, t, sec)

	startController(t, runOptions{provisioner: prov})
	waitPhase(ctx, t, obc, obv1.PhaseBound)
	b := readBinding(ctx, t, obc)
	if b.secret.UID != sec.UID {
		t.Errorf("the Secret was replaced (uid %s, was %s)", b.secret.UID, sec.UID)
	}
	if b.secret.Labels[LabelProvisioner] != LabelValue(prov) {
		t.Errorf("the Secret's labels %v lack %s", b.secret.Labels, LabelProvisioner)
	}
	id := string(b.secret.Data[KeyAccessKeyID])
	if k := keysOf(ctx, t, string(obc.UID)); len(k) != 1 || k[0] != id {
		t.Errorf("backend keys %v, want only the Secret's %s", k, id)
	}
	checkCredentials(ctx, t, b, "")
}

// TestClaimGoneWithoutDeletion: a claim that disappears without the
// controller removing its finalizer (kube-apiserver can let a delete
// through while the patch adding the claim's first finalizer succeeds,
// kubernetes/kubernetes#77988; here the finalizer is removed by hand while
// the controller is down) leaves an ObjectBucket naming a UID that no
// longer exists. The controller undoes everything made for it from that
// ObjectBucket: bucket, user and keys, Secret, ObjectBucket (the
// ConfigMap is left to the garbage collector).
func TestClaimGoneWithoutDeletion(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, k8s)
	prov := newProvisioner()
	class := storageClass(ctx, t, prov, corev1.PersistentVolumeReclaimDelete, nil)
	obc, b := boundClaim(ctx, t, prov, newClaim(ns, "app", class, nil))
	got := getClaim(ctx, t, k8s, obc)
	base := got.DeepCopy()
	got.Finalizers = nil
	if err := k8s.Patch(ctx, got, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	deleteObj(ctx, t, got)
	waitGone(ctx, t, got)

	startController(t, runOptions{provisioner: prov})
	waitGone(ctx, t, b.ob)
	waitGone(ctx, t, b.secret)
	checkLeftToCollector(ctx, t, b.cm, obc.UID)
	if bucketExists(ctx, t, b.bucket) {
		t.Errorf("bucket %s of the vanished claim is still there", b.bucket)
	}
	if k := keysOf(ctx, t, string(obc.UID)); len(k) != 0 {
		t.Errorf("keys %v of the vanished claim are still there", k)
	}
}

// TestOldProvisionerClaim: a claim with generateBucketName and the
// bucketName an old provisioner generated from it is read as generated: its
// existing bucket (no owner mark of ours) is adopted, no new one is made.
func TestOldProvisionerClaim(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, k8s)
	gen := "legacy-" + randomHex(4)
	old := gen + "-8a3e0e5c-0d4b-4f5e-9d2b-1f0e6f3a7b9c"
	createRawBucket(ctx, t, old)
	run := startController(t, runOptions{provisioner: newProvisioner()})
	class := storageClass(ctx, t, run.provisioner, corev1.PersistentVolumeReclaimDelete, nil)
	obc := newClaim(ns, "legacy", class, func(s *obv1.ObjectBucketClaimSpec) {
		s.GenerateBucketName, s.BucketName, s.ObjectBucketName = gen, old, "obc-"+ns+"-legacy"
	})
	controllerutil.AddFinalizer(obc, Finalizer)
	b := bind(ctx, t, obc)
	if b.bucket != old {
		t.Errorf("bucket = %q, want the old provisioner's %q", b.bucket, old)
	}
	if names := bucketsWithPrefix(ctx, t, gen); len(names) != 1 {
		t.Errorf("buckets %v, want only the old one", names)
	}
	checkCredentials(ctx, t, b, "")
}

// TestExactNameTaken: a claim asking for the exact name of a bucket that
// existed before fails, and deleting that claim (the cleanup of a failed
// provision) never deletes the bucket.
func TestExactNameTaken(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, k8s)
	taken := "taken-" + randomHex(6)
	createRawBucket(ctx, t, taken)
	run := startController(t, runOptions{provisioner: newProvisioner()})
	class := storageClass(ctx, t, run.provisioner, corev1.PersistentVolumeReclaimDelete, nil)
	obc := newClaim(ns, "taken", class, func(s *obv1.ObjectBucketClaimSpec) { s.GenerateBucketName, s.BucketName = "", taken })
	create(ctx, t, obc)
	got := waitPhase(ctx, t, obc, obv1.PhaseFailed)
	wantProvisioned(t, got, ReasonBucketConflict)
	deleteObj(ctx, t, obc)
	waitGone(ctx, t, obc)
	if !bucketExists(ctx, t, taken) {
		t.Errorf("the pre-existing bucket %s was deleted by the cleanup of a failed claim", taken)
	}
}

// TestDeleteWhileProvisioningRetries is lib#171: the backend keeps failing,
// the claim is deleted, provisioning stops and the claim goes away.
func TestDeleteWhileProvisioningRetries(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, k8s)
	drv := &hookDriver{Driver: backend.drv, ensureBucket: func(context.Context, driver.BucketSpec) error {
		return errors.New("backend unavailable (test)")
	}}
	run := startController(t, runOptions{provisioner: newProvisioner(), drv: drv})
	class := storageClass(ctx, t, run.provisioner, corev1.PersistentVolumeReclaimDelete, nil)
	obc := newClaim(ns, "retrying", class, nil)
	create(ctx, t, obc)
	waitFor(ctx, t, "two failed provisioning attempts", func(context.Context) (bool, string) {
		n := drv.ensureBucketCalls.Load()
		return n >= 2, fmt.Sprint(n, " calls")
	})
	got := getClaim(ctx, t, k8s, obc)
	wantProvisioned(t, got, ReasonBackendError)
	deleteObj(ctx, t, obc)
	waitGone(ctx, t, obc)
	calls := drv.ensureBucketCalls.Load()
	time.Sleep(2 * time.Second)
	if n := drv.ensureBucketCalls.Load(); n != calls {
		t.Errorf("EnsureBucket called %d more times after the claim was gone", n-calls)
	}
	if obs := objectBucketsOf(ctx, t, got); len(obs) != 0 {
		t.Errorf("object buckets %v left", obs)
	}
}

// TestDeletionNotStuck: neither a deleted StorageClass (rook#6300) nor a
// bucket already gone (rook#7351) blocks deleting a claim.
func TestDeletionNotStuck(t *testing.T) {
	apiServer(t)
	cases := map[string]struct {
		reason string
		before func(ctx context.Context, t *testing.T, class string, b bindingOf)
	}{
		"StorageClassGone": {
			reason: "deletion works from the ObjectBucket's record",
			before: func(ctx context.Context, t *testing.T, class string, _ bindingOf) {
				deleteObj(ctx, t, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class}})
			},
		},
		"BucketGone": {
			reason: "a missing bucket is deleted already",
			before: func(ctx context.Context, t *testing.T, _ string, b bindingOf) {
				if err := backend.drv.DeleteBucket(ctx, b.bucket, driver.OwnerMark(claimKind, string(b.claim.UID)), true); err != nil {
					t.Fatal(err)
				}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			ns := namespace(ctx, t, k8s)
			run := startController(t, runOptions{provisioner: newProvisioner()})
			class := storageClass(ctx, t, run.provisioner, corev1.PersistentVolumeReclaimDelete, nil)
			obc := newClaim(ns, "stuck", class, nil)
			b := bind(ctx, t, obc)
			tc.before(ctx, t, class, b)
			deleteObj(ctx, t, obc)
			waitGone(ctx, t, obc)
			if bucketExists(ctx, t, b.bucket) {
				t.Errorf("%s: bucket %s left", tc.reason, b.bucket)
			}
		})
	}
}

// TestDeletionWaitsUntilGone: the claim keeps its finalizer while an object
// it deleted still exists (here held by someone else's finalizer).
func TestDeletionWaitsUntilGone(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, k8s)
	run := startController(t, runOptions{provisioner: newProvisioner()})
	class := storageClass(ctx, t, run.provisioner, corev1.PersistentVolumeReclaimDelete, nil)
	obc := newClaim(ns, "held", class, nil)
	b := bind(ctx, t, obc)
	base := b.secret.DeepCopy()
	controllerutil.AddFinalizer(b.secret, "test/hold")
	if err := k8s.Patch(ctx, b.secret, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	deleteObj(ctx, t, obc)
	time.Sleep(2 * time.Second)
	if got := getClaim(ctx, t, k8s, obc); !contains(got.Finalizers, Finalizer) {
		t.Fatalf("claim lost its finalizer while its Secret still exists")
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(b.secret), b.secret); err != nil {
		t.Fatal(err)
	}
	if contains(b.secret.Finalizers, Finalizer) {
		t.Errorf("Secret still has %s after the claim was deleted", Finalizer)
	}
	base = b.secret.DeepCopy()
	controllerutil.RemoveFinalizer(b.secret, "test/hold")
	if err := k8s.Patch(ctx, b.secret, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	waitGone(ctx, t, obc)
}

// TestBrownfield: a StorageClass naming an existing bucket gives claims
// access to it; deleting the claim revokes access and keeps the bucket.
func TestBrownfield(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, k8s)
	brown := "brown-" + randomHex(6)
	createRawBucket(ctx, t, brown)
	other := "other-" + randomHex(6)
	createRawBucket(ctx, t, other)
	run := startController(t, runOptions{provisioner: newProvisioner()})
	class := storageClass(ctx, t, run.provisioner, corev1.PersistentVolumeReclaimDelete, map[string]string{ParameterBucketName: brown})
	obc := newClaim(ns, "brown", class, func(s *obv1.ObjectBucketClaimSpec) { s.GenerateBucketName = "" })
	b := bind(ctx, t, obc)
	if b.bucket != brown || b.ob.Spec.AdditionalState[stateBucketOwned] != "false" || b.ob.Spec.ReclaimPolicy != obv1.ReclaimRetain {
		t.Errorf("bucket %q owned %q policy %q, want %q, false, Retain", b.bucket, b.ob.Spec.AdditionalState[stateBucketOwned], b.ob.Spec.ReclaimPolicy, brown)
	}
	// Never the claim's: never looked at as one, never marked.
	if st := b.ob.Spec.AdditionalState; st[stateBucketAttempted] != "false" || st[stateAdoptUnmarked] != "false" {
		t.Errorf("brownfield object bucket state %v, want bucket-attempted and adopt-unmarked false", st)
	}
	if obs, err := backend.drv.Observe(ctx, driver.ObserveRequest{Bucket: brown}); err != nil || obs.BucketOwner != "" {
		t.Errorf("brownfield bucket owner mark %q (%v), want none", obs.BucketOwner, err)
	}
	checkCredentials(ctx, t, b, other)
	deleteObj(ctx, t, obc)
	waitGone(ctx, t, obc)
	if !bucketExists(ctx, t, brown) {
		t.Errorf("brownfield bucket %s was deleted", brown)
	}
	if k := keysOf(ctx, t, string(b.claim.UID)); len(k) != 0 {
		t.Errorf("keys %v left", k)
	}
}

// TestRetain: reclaim policy Retain keeps the bucket and revokes access.
func TestRetain(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, k8s)
	run := startController(t, runOptions{provisioner: newProvisioner()})
	class := storageClass(ctx, t, run.provisioner, corev1.PersistentVolumeReclaimRetain, nil)
	obc := newClaim(ns, "kept", class, nil)
	b := bind(ctx, t, obc)
	if b.ob.Spec.ReclaimPolicy != obv1.ReclaimRetain {
		t.Errorf("object bucket reclaim policy = %q, want Retain", b.ob.Spec.ReclaimPolicy)
	}
	deleteObj(ctx, t, obc)
	waitGone(ctx, t, obc)
	if !bucketExists(ctx, t, b.bucket) {
		t.Errorf("bucket %s was deleted under Retain", b.bucket)
	}
	if k := keysOf(ctx, t, string(b.claim.UID)); len(k) != 0 {
		t.Errorf("keys %v left", k)
	}
}

// TestDriftRepaired: a deleted Secret or ConfigMap comes back with the
// same keys.
func TestDriftRepaired(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, k8s)
	run := startController(t, runOptions{provisioner: newProvisioner()})
	class := storageClass(ctx, t, run.provisioner, corev1.PersistentVolumeReclaimDelete, nil)
	obc := newClaim(ns, "drift", class, nil)
	b := bind(ctx, t, obc)
	for _, obj := range []client.Object{b.secret, b.cm} {
		deleteObj(ctx, t, obj)
	}
	waitFor(ctx, t, "Secret and ConfigMap recreated", func(ctx context.Context) (bool, string) {
		var sec corev1.Secret
		var cm corev1.ConfigMap
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(obc), &sec); err != nil || sec.UID == b.secret.UID || !sec.DeletionTimestamp.IsZero() {
			return false, fmt.Sprintf("secret: %v", err)
		}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(obc), &cm); err != nil || cm.UID == b.cm.UID || !cm.DeletionTimestamp.IsZero() {
			return false, fmt.Sprintf("config map: %v", err)
		}
		if diff := cmp.Diff(b.secret.Data, sec.Data); diff != "" {
			return false, "secret data differ: " + diff
		}
		return cmp.Equal(b.cm.Data, cm.Data), "config map data differ"
	})
	checkCredentials(ctx, t, readBinding(ctx, t, obc), "")
}

// TestDriftRepairCrash: a crash in the middle of recreating a deleted
// Secret, once its keys are stashed and once the old object is gone, still
// brings the Secret back with the same keys, which stay the user's only
// ones, and leaves no stash behind.
func TestDriftRepairCrash(t *testing.T) {
	apiServer(t)
	for _, point := range []string{"keys-stashed", "secret-released"} {
		t.Run(point, func(t *testing.T) {
			ctx := testContext(t)
			ns := namespace(ctx, t, k8s)
			prov := newProvisioner()
			class := storageClass(ctx, t, prov, corev1.PersistentVolumeReclaimDelete, nil)
			obc, b := boundClaim(ctx, t, prov, newClaim(ns, "drift", class, nil))
			var first *controllerRun
			hook, crashed := crashHook(point, &first)
			first = startController(t, runOptions{provisioner: prov, afterWrite: hook})
			deleteObj(ctx, t, b.secret)
			waitCrash(ctx, t, crashed, point)
			first.stop()
			startController(t, runOptions{provisioner: prov})
			waitFor(ctx, t, "the Secret recreated with its keys and the stash gone", func(ctx context.Context) (bool, string) {
				var sec, st corev1.Secret
				if err := k8s.Get(ctx, client.ObjectKeyFromObject(obc), &sec); err != nil || sec.UID == b.secret.UID || !sec.DeletionTimestamp.IsZero() {
					return false, fmt.Sprintf("secret: %v", err)
				}
				if diff := cmp.Diff(b.secret.Data, sec.Data); diff != "" {
					return false, "secret data differ: " + diff
				}
				err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: StashName(obc.UID)}, &st)
				return apierrors.IsNotFound(err), fmt.Sprintf("stash: %v", err)
			})
			id := string(b.secret.Data[KeyAccessKeyID])
			if k := keysOf(ctx, t, string(obc.UID)); len(k) != 1 || k[0] != id {
				t.Errorf("backend keys %v, want only the Secret's %s", k, id)
			}
			checkCredentials(ctx, t, readBinding(ctx, t, obc), "")
		})
	}
}

// TestStashNameTaken: a Secret of someone else's under the name of the
// claim's key stash is left alone, and a deleted Secret is still recreated
// with its keys (without a copy in between, and a warning says so).
func TestStashNameTaken(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, k8s)
	run := startController(t, runOptions{provisioner: newProvisioner()})
	class := storageClass(ctx, t, run.provisioner, corev1.PersistentVolumeReclaimDelete, nil)
	obc := newClaim(ns, "drift", class, nil)
	b := bind(ctx, t, obc)
	theirs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: StashName(obc.UID)}, StringData: map[string]string{"k": "v"}}
	create(ctx, t, theirs)
	deleteObj(ctx, t, b.secret)
	waitFor(ctx, t, "the Secret recreated with its keys", func(ctx context.Context) (bool, string) {
		var sec corev1.Secret
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(obc), &sec); err != nil || sec.UID == b.secret.UID || !sec.DeletionTimestamp.IsZero() {
			return false, fmt.Sprintf("secret: %v", err)
		}
		diff := cmp.Diff(b.secret.Data, sec.Data)
		return diff == "", "secret data differ: " + diff
	})
	var after corev1.Secret
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(theirs), &after); err != nil || string(after.Data["k"]) != "v" || len(after.Data) != 1 || len(after.OwnerReferences) != 0 {
		t.Errorf("the Secret under the stash's name was changed: %v, data keys %v, owners %v", err, keys(after.Data), after.OwnerReferences)
	}
}

// TestManyClaimsAtOnce: 50 claims created together are all Bound, each with
// working credentials of its own.
func TestManyClaimsAtOnce(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, k8s)
	run := startController(t, runOptions{provisioner: newProvisioner()})
	class := storageClass(ctx, t, run.provisioner, corev1.PersistentVolumeReclaimDelete, nil)
	const n = 50
	claims := make([]*obv1.ObjectBucketClaim, n)
	start := time.Now()
	for i := range claims {
		claims[i] = newClaim(ns, fmt.Sprintf("many-%02d", i), class, nil)
		create(ctx, t, claims[i])
	}
	for _, c := range claims {
		waitPhase(ctx, t, c, obv1.PhaseBound)
	}
	t.Logf("%d claims Bound in %s", n, time.Since(start).Round(time.Millisecond))
	seen := map[string]bool{}
	for i, c := range claims {
		b := readBinding(ctx, t, c)
		id := string(b.secret.Data[KeyAccessKeyID])
		if seen[id] || seen[b.bucket] {
			t.Errorf("claim %s shares key %s or bucket %s", c.Name, id, b.bucket)
		}
		seen[id], seen[b.bucket] = true, true
		checkCredentials(ctx, t, b, readBindingBucket(claims[(i+1)%n]))
	}
}

func readBindingBucket(c *obv1.ObjectBucketClaim) string {
	var got obv1.ObjectBucketClaim
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(c), &got); err != nil {
		return ""
	}
	return got.Annotations[AnnotationBucketName]
}

// crashHook returns an afterWrite hook that, the first time point is
// passed, stops *run and cuts the pass there, as a crash at that point
// would, and a channel closed when it has.
func crashHook(point string, run **controllerRun) (func(string) error, <-chan struct{}) {
	crashed := make(chan struct{})
	var once sync.Once
	return func(p string) error {
		if p != point {
			return nil
		}
		fired := false
		once.Do(func() { fired = true; (*run).cancel(); close(crashed) })
		if fired {
			return errCrash
		}
		return nil
	}, crashed
}

func waitCrash(ctx context.Context, t *testing.T, crashed <-chan struct{}, point string) {
	t.Helper()
	select {
	case <-crashed:
	case <-ctx.Done():
		t.Fatalf("crash point %s never reached", point)
	}
}

// boundClaim creates obc, lets a controller of prov bind it, stops that
// controller and returns the claim and what it was given.
func boundClaim(ctx context.Context, t *testing.T, prov string, obc *obv1.ObjectBucketClaim) (*obv1.ObjectBucketClaim, bindingOf) {
	t.Helper()
	run := startController(t, runOptions{provisioner: prov})
	b := bind(ctx, t, obc)
	run.stop()
	return obc, b
}

// bind creates obc and returns what it was given once Bound.
func bind(ctx context.Context, t *testing.T, obc *obv1.ObjectBucketClaim) bindingOf {
	t.Helper()
	create(ctx, t, obc)
	waitPhase(ctx, t, obc, obv1.PhaseBound)
	return readBinding(ctx, t, obc)
}

// TestFailedRevokeKeepsBucket: while a deleted claim's credential cannot be
// revoked, its bucket stays. Deleting the bucket frees its name, and a claim
// naming the same bucket (spec.bucketName) could be given it while the old
// key, whose policy names the bucket, still works. Once the revocation
// succeeds, the deletion finishes.
func TestFailedRevokeKeepsBucket(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, k8s)
	prov := newProvisioner()
	class := storageClass(ctx, t, prov, corev1.PersistentVolumeReclaimDelete, nil)
	var failing atomic.Bool
	var attempts atomic.Int64
	failing.Store(true)
	drv := &hookDriver{Driver: backend.drv, revokeCredential: func(ctx context.Context, user, owner string) error {
		attempts.Add(1)
		if failing.Load() {
			return errors.New("IAM endpoint unreachable (test)")
		}
		return backend.drv.RevokeCredential(ctx, user, owner)
	}}
	startController(t, runOptions{provisioner: prov, drv: drv})
	obc := newClaim(ns, "revoke-fails", class, func(s *obv1.ObjectBucketClaimSpec) { s.BucketName = "bbt-revoke-" + randomHex(4) })
	b := bind(ctx, t, obc)

	deleteObj(ctx, t, obc)
	waitFor(ctx, t, "three failed revocations", func(context.Context) (bool, string) {
		n := attempts.Load()
		return n >= 3, fmt.Sprintf("%d revocations tried", n)
	})
	if !bucketExists(ctx, t, b.bucket) {
		t.Fatalf("bucket %s was deleted while the claim's key could not be revoked", b.bucket)
	}
	checkCredentials(ctx, t, b, "") // the key lives on, and so must its bucket

	failing.Store(false)
	waitGone(ctx, t, obc)
	if bucketExists(ctx, t, b.bucket) {
		t.Errorf("bucket %s left after the deletion finished", b.bucket)
	}
	if k := keysOf(ctx, t, string(b.claim.UID)); len(k) != 0 {
		t.Errorf("keys %v left after the deletion finished", k)
	}
}
