package objectbucket

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	obv1 "github.com/bucketbroker/bucketbroker/api/objectbucket/v1alpha1"
	"github.com/bucketbroker/bucketbroker/internal/driver/minio"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
	"github.com/bucketbroker/bucketbroker/test/harness"
)

// TestClaimQuotaRefused: a claim whose additionalConfig asks for a quota
// the driver cannot enforce (the embedded server enforces none), or one
// that is not a positive whole number, goes Failed with reason Invalid and
// a message naming the key, before anything is made: no ObjectBucket, no
// bucket, no user.
func TestClaimQuotaRefused(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, k8s)
	drv := &hookDriver{Driver: backend.drv}
	run := startController(t, runOptions{provisioner: newProvisioner(), drv: drv})
	class := storageClass(ctx, t, run.provisioner, corev1.PersistentVolumeReclaimDelete, nil)
	for _, tc := range []struct {
		name   string
		config map[string]string
		says   string
	}{
		{"size", map[string]string{ConfigMaxSize: "1Gi"}, "cannot limit a bucket by size (maxSize)"},
		{"count", map[string]string{ConfigMaxObjects: "1000"}, "cannot limit a bucket by object count (maxObjects)"},
		{"bad-size", map[string]string{ConfigMaxSize: "lots"}, `maxSize: "lots" is not a positive whole number of bytes`},
		{"bad-count", map[string]string{ConfigMaxObjects: "-3"}, `maxObjects: "-3" is not a positive whole number`},
	} {
		obc := newClaim(ns, tc.name, class, func(s *obv1.ObjectBucketClaimSpec) { s.AdditionalConfig = tc.config })
		create(ctx, t, obc)
		got := waitPhase(ctx, t, obc, obv1.PhaseFailed)
		wantProvisioned(t, got, ReasonInvalid, "additionalConfig", tc.says)
		waitEvent(ctx, t, obc, ReasonInvalid)
		if obs := objectBucketsOf(ctx, t, got); len(obs) != 0 {
			t.Errorf("%s: ObjectBuckets %v were made for a claim whose quota is refused", tc.name, obs)
		}
	}
	if b, c, o := drv.ensureBucketCalls.Load(), drv.ensureCredCalls.Load(), drv.observeCalls.Load(); b+c+o != 0 {
		t.Errorf("the refused claims made %d EnsureBucket, %d EnsureCredential and %d Observe calls, want none", b, c, o)
	}
}

// TestClaimQuotaOnMinIO: a claim on MinIO, with a quota. The Secret's key
// works in the claim's bucket and nowhere else; maxSize is the bucket's
// hard limit: a bound key cannot write past it, raising it in the claim's
// additionalConfig lets the same write through, and taking it out lifts
// the limit; the ObjectBucket records each limit applied. Deleting the
// claim deletes its bucket and its user.
func TestClaimQuotaOnMinIO(t *testing.T) {
	be := harness.MinIOBackend(t, "")
	apiServer(t)
	ctx := testContext(t)
	drv, err := minio.New(minio.Config{Endpoint: be.S3, AccessKeyID: be.AccessKey, SecretAccessKey: be.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	ns := namespace(ctx, t, k8s)
	run := startController(t, runOptions{provisioner: newProvisioner(), drv: drv})
	class := storageClass(ctx, t, run.provisioner, corev1.PersistentVolumeReclaimDelete, nil)
	obc := newClaim(ns, "limited", class, func(s *obv1.ObjectBucketClaimSpec) {
		s.AdditionalConfig = map[string]string{ConfigMaxSize: "1Mi"}
	})
	create(ctx, t, obc)
	waitPhase(ctx, t, obc, obv1.PhaseBound)
	b := readBinding(ctx, t, obc)
	creds := map[string]any{"bucket": b.bucket, "access_key_id": string(b.secret.Data[KeyAccessKeyID]),
		"secret_access_key": string(b.secret.Data[KeySecretAccessKey])}
	if got := b.ob.Annotations[stateMaxSize]; got != "1048576" {
		t.Errorf("ObjectBucket records max size %q, want 1048576", got)
	}
	big := strings.Repeat("x", 2<<20)
	if err := be.Put(creds, "big", big); err == nil {
		t.Fatal("put of 2 MiB into a claim limited to 1Mi succeeded, want it refused")
	}
	if err := be.Put(creds, "small", "fits"); err != nil {
		t.Fatalf("put of 4 bytes into a claim limited to 1Mi: %v", err)
	}
	other := b.bucket + "-other"
	if err := drv.EnsureBucket(ctx, driver.BucketSpec{Name: other, Owner: "test/other"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = drv.DeleteBucket(context.Background(), other, "test/other", true) })
	elsewhere := map[string]any{"bucket": other, "access_key_id": creds["access_key_id"], "secret_access_key": creds["secret_access_key"]}
	if err := be.Put(elsewhere, "probe", "x"); err == nil {
		t.Errorf("the claim's key wrote into another bucket, %s", other)
	}

	setQuota := func(size string) {
		t.Helper()
		patch := fmt.Sprintf(`{"spec":{"additionalConfig":{%q:%q}}}`, ConfigMaxSize, size)
		if size == "" {
			patch = fmt.Sprintf(`{"spec":{"additionalConfig":{%q:null}}}`, ConfigMaxSize)
		}
		if err := k8s.Patch(ctx, obc, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
			t.Fatalf("patch claim: %v", err)
		}
	}
	recorded := func(want string) {
		t.Helper()
		waitFor(ctx, t, "max size "+want+" recorded", func(ctx context.Context) (bool, string) {
			var ob obv1.ObjectBucket
			if err := k8s.Get(ctx, client.ObjectKey{Name: b.ob.Name}, &ob); err != nil {
				return false, err.Error()
			}
			got, ok := ob.Annotations[stateMaxSize]
			return got == want && (ok || want == ""), fmt.Sprintf("recorded %q", got)
		})
	}
	setQuota("4Mi")
	recorded("4194304")
	if err := be.Put(creds, "big", big); err != nil {
		t.Fatalf("put of 2 MiB after the claim's limit was raised to 4Mi: %v", err)
	}
	setQuota("")
	recorded("")
	if err := be.Put(creds, "bigger", strings.Repeat("y", 5<<20)); err != nil {
		t.Fatalf("put of 5 MiB after the claim's limit was taken out: %v", err)
	}
	if got := getClaim(ctx, t, k8s, obc); got.Status.Phase != obv1.PhaseBound {
		t.Errorf("claim phase after the quota changes = %s, want Bound", got.Status.Phase)
	}
	for _, key := range []string{"small", "big", "bigger"} {
		if err := be.Delete(creds, key); err != nil {
			t.Fatal(err)
		}
	}
	deleteObj(ctx, t, obc)
	waitGone(ctx, t, obc)
	user := driver.UserName(testPrefix, claimKind, string(b.claim.UID))
	obs, err := drv.Observe(ctx, driver.ObserveRequest{Bucket: b.bucket, UserName: user})
	if err != nil || obs.BucketExists || obs.UserExists {
		t.Errorf("after the claim's deletion: bucket %s exists %v, user %s exists %v (%v); want both deleted",
			b.bucket, obs.BucketExists, user, obs.UserExists, err)
	}
}
