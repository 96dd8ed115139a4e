package objectbucket

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	obv1 "github.com/bucketbroker/bucketbroker/api/objectbucket/v1alpha1"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// The tests of this file are about one gap: creating a bucket (or, on a
// server whose CreateUser ignores tags, a user) and marking it are two
// backend calls. An unmarked bucket or user under the claim's name is the
// claim's own only if the ObjectBucket recorded, before the first attempt,
// that a look found the name free.

// adoptions records the AdoptUnmarked of each Ensure call a hook saw.
type adoptions struct {
	mu  sync.Mutex
	got []bool
}

func (a *adoptions) add(v bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, v)
}

func (a *adoptions) all() []bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.got)
}

// TestUnmarkedBucketAfterAttempt: the controller dies between creating the
// claim's bucket and marking it (here the first EnsureBucket creates the
// bucket without its mark and fails, as the driver does when the process
// dies at bucket/created-unmarked). The ObjectBucket holds the attempt, so
// the next pass adopts the bucket: the claim is Bound, with one bucket,
// marked as the claim's.
func TestUnmarkedBucketAfterAttempt(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, k8s)
	var seen adoptions
	var died atomic.Bool
	drv := &hookDriver{Driver: backend.drv}
	drv.ensureBucket = func(ctx context.Context, spec driver.BucketSpec) error {
		seen.add(spec.AdoptUnmarked)
		if died.CompareAndSwap(false, true) {
			if _, err := rootS3().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(spec.Name)}); err != nil {
				return err
			}
			return errors.New("died between CreateBucket and PutBucketTagging (test)")
		}
		return backend.drv.EnsureBucket(ctx, spec)
	}
	run := startController(t, runOptions{provisioner: newProvisioner(), drv: drv})
	class := storageClass(ctx, t, run.provisioner, corev1.PersistentVolumeReclaimDelete, nil)
	gen := "unmarked-" + randomHex(4)
	obc := newClaim(ns, "unmarked", class, func(s *obv1.ObjectBucketClaimSpec) { s.GenerateBucketName = gen })
	create(ctx, t, obc)
	got := waitPhase(ctx, t, obc, obv1.PhaseBound)
	b := readBinding(ctx, t, obc)

	if diff := cmp.Diff([]string{b.bucket}, bucketsWithPrefix(ctx, t, gen)); diff != "" {
		t.Errorf("buckets (-want +got):\n%s", diff)
	}
	if owner := bucketOwner(ctx, t, b.bucket); owner != driver.OwnerMark(claimKind, string(got.UID)) {
		t.Errorf("bucket %s owner mark %q, want the claim's", b.bucket, owner)
	}
	if st := b.ob.Spec.AdditionalState; st[stateBucketAttempted] != "true" || st[stateUserAttempted] != "true" {
		t.Errorf("object bucket state %v, want both attempts recorded", st)
	}
	if a := seen.all(); len(a) < 2 || slices.Contains(a, false) {
		t.Errorf("EnsureBucket AdoptUnmarked per call = %v, want true on every call, at least two", a)
	}
	checkCredentials(ctx, t, b, "")
	deleteObj(ctx, t, obc)
	waitGone(ctx, t, obc)
	if bucketExists(ctx, t, b.bucket) {
		t.Errorf("bucket %s left after the claim was deleted", b.bucket)
	}
}

// TestUnmarkedBucketBeforeClaim: an unmarked bucket under the claim's
// generated name that existed before the claim's first attempt is someone
// else's. The claim is Failed with BucketConflict and an event, nothing is
// created, the bucket is never marked, emptied or deleted; once the name
// is free, a later pass looks again, records the attempt and provisions.
func TestUnmarkedBucketBeforeClaim(t *testing.T) {
	apiServer(t)
	cases := map[string]struct {
		reason string
		then   func(ctx context.Context, t *testing.T, obc *obv1.ObjectBucketClaim, bucket string, drv *hookDriver)
	}{
		"ClaimDeleted": {
			reason: "the cleanup of a refused claim leaves the bucket as it was",
			then: func(ctx context.Context, t *testing.T, obc *obv1.ObjectBucketClaim, bucket string, _ *hookDriver) {
				deleteObj(ctx, t, obc)
				waitGone(ctx, t, obc)
				if !bucketExists(ctx, t, bucket) || bucketOwner(ctx, t, bucket) != "" {
					t.Errorf("bucket %s after the claim was deleted: exists %v, owner %q; want it untouched", bucket, bucketExists(ctx, t, bucket), bucketOwner(ctx, t, bucket))
				}
				if _, err := rootS3().HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String("theirs")}); err != nil {
					t.Errorf("the bucket's object after the claim was deleted: %v", err)
				}
			},
		},
		"NameFreed": {
			reason: "a refused claim looks again, and provisions once the name is free",
			then: func(ctx context.Context, t *testing.T, obc *obv1.ObjectBucketClaim, bucket string, drv *hookDriver) {
				deleteRawBucket(ctx, t, bucket)
				patchAnnotation(ctx, t, obc, "test/poke", "freed") // a pass now, not after foreignRetry
				got := waitPhase(ctx, t, obc, obv1.PhaseBound)
				b := readBinding(ctx, t, obc)
				if st := b.ob.Spec.AdditionalState; st[stateBucketAttempted] != "true" {
					t.Errorf("object bucket state %v, want the bucket's attempt recorded", st)
				}
				if owner := bucketOwner(ctx, t, bucket); owner != driver.OwnerMark(claimKind, string(got.UID)) {
					t.Errorf("bucket %s owner mark %q, want the claim's", bucket, owner)
				}
				checkCredentials(ctx, t, b, "")
				deleteObj(ctx, t, obc)
				waitGone(ctx, t, obc)
				if bucketExists(ctx, t, bucket) {
					t.Errorf("bucket %s, the claim's once the name was free, left after the claim was deleted", bucket)
				}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			ns := namespace(ctx, t, k8s)
			prov := newProvisioner()
			class := storageClass(ctx, t, prov, corev1.PersistentVolumeReclaimDelete, nil)
			gen := "before-" + randomHex(4)
			obc := newClaim(ns, "before", class, func(s *obv1.ObjectBucketClaimSpec) { s.GenerateBucketName = gen })
			create(ctx, t, obc) // no controller serves prov yet
			bucket := generatedBucketName(gen, obc.UID)
			createRawBucket(ctx, t, bucket)
			t.Cleanup(func() { deleteRawBucket(context.Background(), t, bucket) })
			if _, err := rootS3().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("theirs"), Body: strings.NewReader("x")}); err != nil {
				t.Fatal(err)
			}

			drv := &hookDriver{Driver: backend.drv}
			startController(t, runOptions{provisioner: prov, drv: drv})
			got := waitPhase(ctx, t, obc, obv1.PhaseFailed)
			wantProvisioned(t, got, ReasonBucketConflict, bucket, "no owner mark")
			waitEvent(ctx, t, got, ReasonBucketConflict)
			if n, m := drv.ensureBucketCalls.Load(), drv.ensureCredCalls.Load(); n != 0 || m != 0 {
				t.Errorf("%d EnsureBucket and %d EnsureCredential calls, want none for a refused claim", n, m)
			}
			if owner := bucketOwner(ctx, t, bucket); owner != "" {
				t.Errorf("the foreign bucket got owner mark %q", owner)
			}
			if names := bucketsWithPrefix(ctx, t, gen); !cmp.Equal(names, []string{bucket}) {
				t.Errorf("buckets %v, want only the foreign one", names)
			}
			if obs := observeUser(ctx, t, got.UID); obs.UserExists {
				t.Errorf("a backend user was made for a refused claim: %+v", obs)
			}
			ob := &obv1.ObjectBucket{}
			if err := k8s.Get(ctx, client.ObjectKey{Name: NameForClaim(got.UID)}, ob); err != nil {
				t.Fatal(err)
			}
			if st := ob.Spec.AdditionalState; st[stateBucketAttempted] != "false" || st[stateUserAttempted] != "true" {
				t.Errorf("object bucket state %v, want the user's attempt only", st)
			}
			tc.then(ctx, t, obc, bucket, drv)
		})
	}
}

// TestUnmarkedUserAfterAttempt: on a server whose CreateUser ignores tags
// (SeaweedFS) the driver marks a new user with a second call, TagUser. The
// controller dies in between (here the first EnsureCredential creates the
// user, unmarked and outside the driver's path, and fails). The ObjectBucket
// holds the attempt, so the next EnsureCredential adopts the user: one
// marked user with one key, the Secret's.
func TestUnmarkedUserAfterAttempt(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, k8s)
	var seen adoptions
	var died atomic.Bool
	drv := &hookDriver{Driver: backend.drv}
	drv.ensureCredential = func(ctx context.Context, spec driver.CredentialSpec) (driver.Credential, error) {
		seen.add(spec.AdoptUnmarked)
		if died.CompareAndSwap(false, true) {
			if _, err := rootIAM().CreateUser(ctx, &iam.CreateUserInput{UserName: aws.String(spec.UserName)}); err != nil {
				return driver.Credential{}, err
			}
			return driver.Credential{}, errors.New("died between CreateUser and TagUser (test)")
		}
		return backend.drv.EnsureCredential(ctx, spec)
	}
	run := startController(t, runOptions{provisioner: newProvisioner(), drv: drv})
	class := storageClass(ctx, t, run.provisioner, corev1.PersistentVolumeReclaimDelete, nil)
	obc := newClaim(ns, "unmarked-user", class, nil)
	create(ctx, t, obc)
	got := waitPhase(ctx, t, obc, obv1.PhaseBound)
	b := readBinding(ctx, t, obc)

	obs := observeUser(ctx, t, got.UID)
	if obs.UserOwner != driver.OwnerMark(claimKind, string(got.UID)) {
		t.Errorf("user owner mark %q, want the claim's", obs.UserOwner)
	}
	if diff := cmp.Diff([]string{string(b.secret.Data[KeyAccessKeyID])}, obs.KeyIDs); diff != "" {
		t.Errorf("live keys (-the Secret's +the backend's):\n%s", diff)
	}
	if st := b.ob.Spec.AdditionalState; st[stateUserAttempted] != "true" {
		t.Errorf("object bucket state %v, want the user's attempt recorded", st)
	}
	if a := seen.all(); len(a) < 2 || slices.Contains(a, false) {
		t.Errorf("EnsureCredential AdoptUnmarked per call = %v, want true on every call, at least two", a)
	}
	checkCredentials(ctx, t, b, "")
	deleteObj(ctx, t, obc)
	waitGone(ctx, t, obc)
	if obs := observeUser(ctx, t, got.UID); obs.UserExists {
		t.Errorf("user left after the claim was deleted: %+v", obs)
	}
}

// TestUnmarkedUserBeforeClaim: an unmarked user under the claim's user name
// that existed before the claim's first attempt is someone else's. The
// claim is Failed with UserConflict and an event before anything is
// created (no bucket either), and the user is never marked, given a key or
// deleted, not even by the claim's deletion.
func TestUnmarkedUserBeforeClaim(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, k8s)
	prov := newProvisioner()
	class := storageClass(ctx, t, prov, corev1.PersistentVolumeReclaimDelete, nil)
	gen := "user-taken-" + randomHex(4)
	obc := newClaim(ns, "user-taken", class, func(s *obv1.ObjectBucketClaimSpec) { s.GenerateBucketName = gen })
	create(ctx, t, obc) // no controller serves prov yet
	user := driver.UserName(testPrefix, claimKind, string(obc.UID))
	createRawUser(ctx, t, user)

	drv := &hookDriver{Driver: backend.drv}
	startController(t, runOptions{provisioner: prov, drv: drv})
	got := waitPhase(ctx, t, obc, obv1.PhaseFailed)
	wantProvisioned(t, got, ReasonUserConflict, user, "no owner mark")
	waitEvent(ctx, t, got, ReasonUserConflict)
	if n, m := drv.ensureBucketCalls.Load(), drv.ensureCredCalls.Load(); n != 0 || m != 0 {
		t.Errorf("%d EnsureBucket and %d EnsureCredential calls, want none for a refused claim", n, m)
	}
	if names := bucketsWithPrefix(ctx, t, gen); len(names) != 0 {
		t.Errorf("buckets %v made for a refused claim", names)
	}
	untouched := func(when string) {
		t.Helper()
		obs := observeUser(ctx, t, got.UID)
		if !obs.UserExists || obs.UserOwner != "" || len(obs.KeyIDs) != 0 {
			t.Errorf("the foreign user %s: %+v; want it there, unmarked, without keys", when, obs)
		}
	}
	untouched("while the claim is refused")
	deleteObj(ctx, t, obc)
	waitGone(ctx, t, obc)
	untouched("after the claim was deleted")
}

func bucketOwner(ctx context.Context, t *testing.T, name string) string {
	t.Helper()
	obs, err := backend.drv.Observe(ctx, driver.ObserveRequest{Bucket: name})
	if err != nil {
		t.Fatalf("observe bucket %s: %v", name, err)
	}
	return obs.BucketOwner
}

func observeUser(ctx context.Context, t *testing.T, uid types.UID) driver.Observation {
	t.Helper()
	obs, err := backend.drv.Observe(ctx, driver.ObserveRequest{UserName: driver.UserName(testPrefix, claimKind, string(uid))})
	if err != nil {
		t.Fatalf("observe user: %v", err)
	}
	return obs
}

// deleteRawBucket deletes a bucket the test made, and its objects.
func deleteRawBucket(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	c := rootS3()
	out, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(name)})
	if err == nil {
		for _, o := range out.Contents {
			_, _ = c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(name), Key: o.Key})
		}
	}
	_, _ = c.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(name)})
}

// waitEvent waits for an event with reason about the claim.
func waitEvent(ctx context.Context, t *testing.T, obc *obv1.ObjectBucketClaim, reason string) {
	t.Helper()
	waitFor(ctx, t, "event "+reason, func(ctx context.Context) (bool, string) {
		var list eventsv1.EventList
		if err := k8s.List(ctx, &list, client.InNamespace(obc.Namespace)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range list.Items {
			if e.Regarding.UID == obc.UID && e.Reason == reason && e.Type == corev1.EventTypeWarning {
				return true, ""
			}
			seen = append(seen, e.Reason)
		}
		return false, fmt.Sprintf("events %v", seen)
	})
}

// TestDeletedBeforeAdoption: the controller dies between creating the
// claim's bucket (or user) and marking it, and the claim is deleted before
// any pass adopts it. The driver deletes only what carries the claim's
// mark; the record holds the attempt, so the deletion marks the unmarked
// bucket or user first and then deletes it: nothing is left that no mark
// or record would ever find again.
func TestDeletedBeforeAdoption(t *testing.T) {
	apiServer(t)
	cases := map[string]struct {
		reason string
		bucket bool // the crash leaves the bucket unmarked, else the user
	}{
		"Bucket": {reason: "an unmarked bucket of an attempted name is the claim's, deleted with it", bucket: true},
		"User":   {reason: "an unmarked user of an attempted name is the claim's, deleted with it"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			ns := namespace(ctx, t, k8s)
			prov := newProvisioner()
			class := storageClass(ctx, t, prov, corev1.PersistentVolumeReclaimDelete, nil)
			gen := "deleted-early-" + randomHex(4)
			obc := newClaim(ns, "early", class, func(s *obv1.ObjectBucketClaimSpec) { s.GenerateBucketName = gen })

			var first atomic.Pointer[controllerRun] // set before the hook can run, read by the manager's workers
			var died atomic.Bool
			crashed := make(chan struct{})
			die := func() error {
				if died.CompareAndSwap(false, true) {
					first.Load().cancel()
					close(crashed)
				}
				return errCrash
			}
			drv := &hookDriver{Driver: backend.drv}
			if tc.bucket {
				drv.ensureBucket = func(ctx context.Context, spec driver.BucketSpec) error {
					if !died.Load() {
						if _, err := rootS3().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(spec.Name)}); err != nil {
							return err
						}
					}
					return die()
				}
			} else {
				drv.ensureCredential = func(ctx context.Context, spec driver.CredentialSpec) (driver.Credential, error) {
					if !died.Load() {
						if _, err := rootIAM().CreateUser(ctx, &iam.CreateUserInput{UserName: aws.String(spec.UserName)}); err != nil {
							return driver.Credential{}, err
						}
					}
					return driver.Credential{}, die()
				}
			}
			first.Store(startController(t, runOptions{provisioner: prov, drv: drv}))
			create(ctx, t, obc)
			select {
			case <-crashed:
			case <-ctx.Done():
				t.Fatal("the first manager never reached the crash window")
			}
			first.Load().stop()
			got := getClaim(ctx, t, k8s, obc)
			bucket := generatedBucketName(gen, got.UID)
			if tc.bucket {
				if !bucketExists(ctx, t, bucket) || bucketOwner(ctx, t, bucket) != "" {
					t.Fatalf("no unmarked bucket %s after the crash: the test proves nothing", bucket)
				}
			} else if obs := observeUser(ctx, t, got.UID); !obs.UserExists || obs.UserOwner != "" {
				t.Fatalf("no unmarked user after the crash (%+v): the test proves nothing", obs)
			}

			deleteObj(ctx, t, obc)
			startController(t, runOptions{provisioner: prov})
			waitGone(ctx, t, obc)
			if bucketExists(ctx, t, bucket) {
				t.Errorf("%s: bucket %s left", tc.reason, bucket)
			}
			if obs := observeUser(ctx, t, got.UID); obs.UserExists {
				t.Errorf("%s: user left: %+v", tc.reason, obs)
			}
		})
	}
}

// TestRemovedMarkBlocksDeletion: the S3 root user removes the owner mark
// of a Bound claim's bucket, then the claim is deleted. A Bound
// ObjectBucket says the bucket was created and marked, so the missing mark
// is someone's change, not a crash's: the bucket is never adopted or
// purged, the claim stays with DeletionBlocked naming the bucket and what
// to do (its condition and an Event), and once the mark is back the
// deletion finishes.
func TestRemovedMarkBlocksDeletion(t *testing.T) {
	apiServer(t)
	ctx := testContext(t)
	ns := namespace(ctx, t, k8s)
	run := startController(t, runOptions{provisioner: newProvisioner()})
	class := storageClass(ctx, t, run.provisioner, corev1.PersistentVolumeReclaimDelete, nil)
	obc := newClaim(ns, "unmarked-later", class, func(s *obv1.ObjectBucketClaimSpec) { s.GenerateBucketName = "unmarked-later" })
	b := bind(ctx, t, obc)
	checkCredentials(ctx, t, b, "") // puts an object
	tags, err := rootS3().GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: aws.String(b.bucket)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rootS3().DeleteBucketTagging(ctx, &s3.DeleteBucketTaggingInput{Bucket: aws.String(b.bucket)}); err != nil {
		t.Fatal(err)
	}

	deleteObj(ctx, t, obc)
	waitEvent(ctx, t, obc, ReasonDeletionBlocked)
	if keepsConditions() {
		// The Event is sent before the reconcile writes the claim's
		// status: wait for the condition too.
		waitFor(ctx, t, "the claim's DeletionBlocked condition", func(ctx context.Context) (bool, string) {
			got := getClaim(ctx, t, k8s, obc)
			c := meta.FindStatusCondition(got.Status.Conditions, ConditionProvisioned)
			ok := c != nil && c.Reason == ReasonDeletionBlocked && strings.Contains(c.Message, b.bucket) && strings.Contains(c.Message, "put the owner mark back")
			return ok, fmt.Sprintf("condition %s = %+v, want %s naming bucket %s and what to do", ConditionProvisioned, c, ReasonDeletionBlocked, b.bucket)
		})
	}
	if !bucketExists(ctx, t, b.bucket) || bucketOwner(ctx, t, b.bucket) != "" {
		t.Fatalf("bucket %s after the deletion was blocked: exists %v, owner %q; want it there, unmarked", b.bucket, bucketExists(ctx, t, b.bucket), bucketOwner(ctx, t, b.bucket))
	}
	if _, err := rootS3().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b.bucket), Key: aws.String("probe")}); err != nil {
		t.Errorf("object in bucket %s after the deletion was blocked: %v, want it kept", b.bucket, err)
	}

	if _, err := rootS3().PutBucketTagging(ctx, &s3.PutBucketTaggingInput{Bucket: aws.String(b.bucket),
		Tagging: &s3types.Tagging{TagSet: tags.TagSet}}); err != nil {
		t.Fatal(err)
	}
	patchAnnotation(ctx, t, obc, "test/poke", "1") // a pass now, not in a minute
	waitGone(ctx, t, obc)
	if bucketExists(ctx, t, b.bucket) {
		t.Errorf("bucket %s left after the mark was put back and the deletion finished", b.bucket)
	}
}
