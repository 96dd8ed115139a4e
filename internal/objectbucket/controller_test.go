package objectbucket

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	obv1 "github.com/bucketbroker/bucketbroker/api/objectbucket/v1alpha1"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

func TestClaimBoundAndDeleted(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, k8s)
	run := startController(t, runOptions{provisioner: newProvisioner()})
	class := storageClass(ctx, t, run.provisioner, corev1.PersistentVolumeReclaimDelete, nil)
	other := "other-" + randomHex(6)
	createRawBucket(ctx, t, other)

	obc := newClaim(ns, "photos", class, func(s *obv1.ObjectBucketClaimSpec) {
		s.AdditionalConfig = map[string]string{"tls": "true"} // passed on to the ObjectBucket as it is
	})
	create(ctx, t, obc)
	got := waitPhase(ctx, t, obc, obv1.PhaseBound)
	b := readBinding(ctx, t, obc)

	for _, typ := range []string{obv1.ConditionReady, ConditionProvisioned} {
		if !keepsConditions() {
			break
		}
		c := meta.FindStatusCondition(got.Status.Conditions, typ)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonBound || c.ObservedGeneration != got.Generation {
			t.Errorf("condition %s = %+v, want True/Bound at generation %d", typ, c, got.Generation)
		}
	}
	wantProvisioned(t, got, ReasonBound)
	if got.Spec.ObjectBucketName != NameForClaim(got.UID) {
		t.Errorf("spec.objectBucketName = %q, want %q", got.Spec.ObjectBucketName, NameForClaim(got.UID))
	}
	wantBucket := generatedBucketName("photos", got.UID)
	if got.Annotations[AnnotationBucketName] != wantBucket {
		t.Errorf("bucket name annotation = %q, want %q", got.Annotations[AnnotationBucketName], wantBucket)
	}
	wantCM := map[string]string{
		KeyBucketHost: "s3.test", KeyBucketName: wantBucket, KeyBucketPort: "9000",
		KeyBucketRegion: "us-east-1", KeyBucketSubRegion: "",
	}
	if diff := cmp.Diff(wantCM, b.cm.Data); diff != "" {
		t.Errorf("config map data (-want +got):\n%s", diff)
	}
	if len(b.secret.Data[KeyAccessKeyID]) == 0 || len(b.secret.Data[KeySecretAccessKey]) == 0 || len(b.secret.Data) != 2 {
		t.Errorf("secret keys = %v, want exactly %s and %s", keys(b.secret.Data), KeyAccessKeyID, KeySecretAccessKey)
	}
	for _, obj := range []client.Object{b.secret, b.cm} {
		if !metav1.IsControlledBy(obj, got) {
			t.Errorf("%T has no controller reference to the claim", obj)
		}
		if obj.GetLabels()[LabelProvisioner] != LabelValue(run.provisioner) {
			t.Errorf("%T labels = %v", obj, obj.GetLabels())
		}
		if _, isSecret := obj.(*corev1.Secret); contains(obj.GetFinalizers(), Finalizer) != isSecret {
			t.Errorf("%T finalizers = %v, want %s on the Secret alone", obj, obj.GetFinalizers(), Finalizer)
		}
	}
	wantOB := obv1.ObjectBucketSpec{
		StorageClassName: class, ReclaimPolicy: obv1.ReclaimDelete,
		ClaimRef: &obv1.ClaimReference{APIVersion: "objectbucket.io/v1alpha1", Kind: "ObjectBucketClaim", Namespace: ns, Name: "photos", UID: got.UID},
		Endpoint: &obv1.Endpoint{BucketHost: "s3.test", BucketPort: 9000, BucketName: wantBucket, Region: "us-east-1",
			AdditionalConfig: map[string]string{"tls": "true"}},
		AdditionalState: map[string]string{
			stateUser: driver.UserName(testPrefix, claimKind, string(got.UID)), stateOwner: driver.OwnerMark(claimKind, string(got.UID)),
			stateBucketOwned: "true", stateAdoptUnmarked: "false",
			stateBucketAttempted: "true", stateUserAttempted: "true",
		},
	}
	if harness.PrunesClaimRef(crdVariant) {
		wantOB.ClaimRef = &obv1.ClaimReference{}
	}
	if diff := cmp.Diff(wantOB, b.ob.Spec); diff != "" {
		t.Errorf("object bucket spec (-want +got):\n%s", diff)
	}
	// The binding and the record as metadata, which no schema prunes.
	if got, want := b.ob.Labels[LabelClaimUID], string(got.UID); got != want {
		t.Errorf("object bucket label %s = %q, want %q", LabelClaimUID, got, want)
	}
	wantRecord := maps.Clone(wantOB.AdditionalState)
	wantRecord[AnnotationClaim] = ns + "/photos"
	wantRecord[AnnotationBucketName] = wantBucket
	wantRecord[annotationReclaimPolicy] = string(obv1.ReclaimDelete)
	if diff := cmp.Diff(wantRecord, b.ob.Annotations); diff != "" {
		t.Errorf("object bucket annotations (-want +got):\n%s", diff)
	}
	if b.ob.Status.Phase != obv1.PhaseBound {
		t.Errorf("object bucket phase = %q, want Bound", b.ob.Status.Phase)
	}
	checkCredentials(ctx, t, b, other)

	deleteObj(ctx, t, obc)
	waitGone(ctx, t, obc)
	for _, obj := range []client.Object{b.secret, b.ob} {
		waitGone(ctx, t, obj)
	}
	checkLeftToCollector(ctx, t, b.cm, got.UID)
	if bucketExists(ctx, t, wantBucket) {
		t.Errorf("bucket %s still exists after the claim (policy Delete) was deleted", wantBucket)
	}
	if k := keysOf(ctx, t, string(got.UID)); len(k) != 0 {
		t.Errorf("user still has keys %v after the claim was deleted", k)
	}
}

// TestClaimRequests: a claim's lifecycle costs at most 12 API requests,
// and its deletion none on the ConfigMap, which the garbage collector
// removes with the claim (BenchmarkClaimLifecycle measures the same on many
// claims at once).
func TestClaimRequests(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, k8s)
	counter := &requestCounter{}
	run := startController(t, runOptions{provisioner: newProvisioner(), wrap: func(rt http.RoundTripper) http.RoundTripper {
		counter.next = rt
		return counter
	}})
	class := storageClass(ctx, t, run.provisioner, corev1.PersistentVolumeReclaimDelete, nil)
	// A first claim's lifecycle, not counted: what a controller does once
	// per process (the watches its cache starts on first use; on a CRD set
	// that prunes fields, the one Event per pruned field) is not a claim's
	// cost, as in BenchmarkClaimLifecycle's 500 claims.
	warm := bind(ctx, t, newClaim(ns, "warm-up", class, nil))
	deleteObj(ctx, t, warm.claim)
	waitGone(ctx, t, warm.claim)
	// Its last requests (an Event is sent from a goroutine of its own) are
	// let through before the count starts.
	for quiet := 0; quiet < 3; {
		n := counter.total.Load()
		time.Sleep(200 * time.Millisecond)
		if counter.total.Load() == n {
			quiet++
		} else {
			quiet = 0
		}
	}
	obc := newClaim(ns, "counted", class, nil)
	_, _ = counter.take()
	b := bind(ctx, t, obc)
	waitFor(ctx, t, "the Bound event sent", func(context.Context) (bool, string) {
		counter.mu.Lock()
		defer counter.mu.Unlock()
		return counter.byKey["POST events"] > 0, fmt.Sprint(counter.byKey)
	})
	created, byCreate := counter.take()
	deleteObj(ctx, t, obc)
	waitGone(ctx, t, obc)
	deleted, byDelete := counter.take()
	if created+deleted > 12 {
		t.Errorf("%d API requests per claim lifecycle (create %v, delete %v), want at most 12", created+deleted, byCreate, byDelete)
	}
	for k, n := range byDelete {
		if strings.HasSuffix(k, " configmaps") {
			t.Errorf("%d %s requests while the claim was deleted (all: %v), want none: the garbage collector removes the ConfigMap", n, k, byDelete)
		}
	}
	checkLeftToCollector(ctx, t, b.cm, b.claim.UID)
}

// TestOldConfigMapFinalizerRemoved: a ConfigMap of the claim that carries
// the shared finalizer (lib-bucket-provisioner put it on ConfigMaps) loses
// it when its claim is deleted, so that the garbage collector can remove
// it.
func TestOldConfigMapFinalizerRemoved(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, k8s)
	prov := newProvisioner()
	run := startController(t, runOptions{provisioner: prov})
	class := storageClass(ctx, t, run.provisioner, corev1.PersistentVolumeReclaimDelete, nil)
	obc := newClaim(ns, "older", class, nil)
	b := bind(ctx, t, obc)
	run.stop()
	base := b.cm.DeepCopy()
	controllerutil.AddFinalizer(b.cm, Finalizer)
	if err := k8s.Patch(ctx, b.cm, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	deleteObj(ctx, t, obc)
	startController(t, runOptions{provisioner: prov})
	waitGone(ctx, t, obc)
	checkLeftToCollector(ctx, t, b.cm, b.claim.UID)
}

// TestClaimNameReused: a claim made again under the name of a deleted
// one is Bound although the deleted claim's ConfigMap is still there
// (envtest runs no garbage collector; in a cluster it may not have run
// yet).
func TestClaimNameReused(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, k8s)
	run := startController(t, runOptions{provisioner: newProvisioner()})
	class := storageClass(ctx, t, run.provisioner, corev1.PersistentVolumeReclaimDelete, nil)
	first := bind(ctx, t, newClaim(ns, "again", class, nil))
	deleteObj(ctx, t, first.claim)
	waitGone(ctx, t, first.claim)
	second := bind(ctx, t, newClaim(ns, "again", class, nil))
	if !metav1.IsControlledBy(second.cm, second.claim) {
		t.Errorf("ConfigMap controlled by %+v, want the new claim %s", metav1.GetControllerOf(second.cm), second.claim.UID)
	}
	checkCredentials(ctx, t, second, "")
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

var _ = fmt.Sprintf
var _ context.Context
