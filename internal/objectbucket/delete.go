package objectbucket

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	obv1 "github.com/bucketbroker/bucketbroker/api/objectbucket/v1alpha1"
	"github.com/bucketbroker/bucketbroker/internal/crashpoint"
	"github.com/bucketbroker/bucketbroker/internal/ensure"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// reconcileDelete undoes a claim from its ObjectBucket alone: the
// StorageClass may be gone, and a provisioning pass that was retrying is
// simply never run again. The ObjectBucket's finalizer says the backend is
// not cleaned yet.
func (r *Reconciler) reconcileDelete(ctx context.Context, s *scope) (reconcile.Result, error) {
	c := s.claim
	if !controllerutil.ContainsFinalizer(c, Finalizer) || r.finalized.has(c.UID) {
		s.stopped = true
		return reconcile.Result{}, nil
	}
	s.phase, s.reason, s.message = obv1.PhaseReleased, ReasonDeleting, "revoking access and deleting the bucket per reclaim policy"

	ob := &obv1.ObjectBucket{}
	found, err := r.getCachedFirst(ctx, types.NamespacedName{Name: NameForClaim(c.UID)}, ob)
	switch {
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("get object bucket: %w", err)
	case !found, boundUID(ob) != c.UID:
		ob = nil // none, or not this claim's: never touched
	}
	if res, err := r.undo(ctx, s, ob); err != nil || !res.IsZero() || s.stopped {
		return res, err
	}

	if err := r.removeFinalizer(ctx, c); err != nil && !apierrors.IsNotFound(err) {
		return r.quiet(ctx, fmt.Errorf("remove claim finalizer: %w", err))
	}
	r.finalized.done(c.UID)
	s.stopped = true // the claim is gone: no status to write
	logf.FromContext(ctx).Info("Claim deleted")
	return reconcile.Result{}, nil
}

// reconcileOrphans undoes what was made for a claim that is gone without
// its finalizer having been removed by us: kube-apiserver can let a delete
// through while a patch that adds the claim's first finalizer succeeds
// (kubernetes/kubernetes#77988), and the pass that made the patch goes on
// to provision. Its ObjectBucket, found by the claim's namespace and name,
// then names a claim UID that no longer exists. The API server is asked
// before anything is undone (a claim the cache does not hold yet is not
// gone); claims this process finalized are skipped, so the passes that
// their last writes trigger send nothing.
func (r *Reconciler) reconcileOrphans(ctx context.Context, key types.NamespacedName) (reconcile.Result, error) {
	var list obv1.ObjectBucketList
	if err := r.client.List(ctx, &list, client.MatchingFields{indexClaim: key.String()}); err != nil {
		return reconcile.Result{}, fmt.Errorf("list object buckets of claim %s: %w", key, err)
	}
	var live *obv1.ObjectBucketClaim // the claim of that name, as the API server has it
	for i := range list.Items {
		ob := &list.Items[i]
		uid := boundUID(ob)
		if ob.Labels[LabelProvisioner] != r.label || uid == "" || r.finalized.has(uid) || ob.Name != NameForClaim(uid) {
			continue
		}
		if live == nil {
			live = &obv1.ObjectBucketClaim{}
			if err := r.reader.Get(ctx, key, live); err != nil && !apierrors.IsNotFound(err) {
				return reconcile.Result{}, fmt.Errorf("get claim %s: %w", key, err)
			}
		}
		if live.UID == uid {
			continue // the cache is behind: the claim lives
		}
		ghost := &obv1.ObjectBucketClaim{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, UID: uid}}
		s := &scope{claim: ghost, base: ghost.DeepCopy()}
		log := logf.FromContext(ctx).WithValues("object_bucket", ob.Name, "claim_uid", uid)
		log.Info("Claim gone without its deletion: undoing what was made for it")
		if res, err := r.undo(ctx, s, ob); err != nil || !res.IsZero() || s.stopped {
			return res, err
		}
		r.finalized.done(uid)
		log.Info("Claim deleted")
	}
	return reconcile.Result{}, nil
}

// undo cleans the backend per the ObjectBucket's record, then deletes the
// claim's Secret and the ObjectBucket, each only if ours, and leaves its
// ConfigMap to the garbage collector. A zero result means the API server
// said each is gone.
func (r *Reconciler) undo(ctx context.Context, s *scope, ob *obv1.ObjectBucket) (reconcile.Result, error) {
	if ob != nil && controllerutil.ContainsFinalizer(ob, Finalizer) {
		if err := r.cleanBackend(ctx, s, ob); err != nil {
			if s.stopped {
				return reconcile.Result{}, err
			}
			s.reason, s.message = ReasonDeletionBlocked, err.Error()
			if errors.Is(err, ensure.ErrMarkLost) {
				// Not a backend failure: only a person can unblock it. Said
				// on the claim and in an Event, and looked at again later.
				r.event(s, ob, corev1.EventTypeWarning, ReasonDeletionBlocked, "Delete", "%s", err.Error())
				return reconcile.Result{RequeueAfter: foreignRetry}, nil
			}
			return reconcile.Result{}, err
		}
	}

	// The ConfigMap is not deleted here: its controller reference lets the
	// garbage collector remove it once the claim is gone, and it carries no
	// finalizer (keepsFinalizer). One that carries it (as
	// lib-bucket-provisioner made them) has it removed so that the
	// collector can.
	key := client.ObjectKeyFromObject(s.claim)
	if err := r.releaseConfigMap(ctx, s); err != nil {
		return r.quiet(ctx, err)
	}

	// The Secret and the ObjectBucket, each only if ours; the claim keeps
	// its finalizer until the API server says each is gone.
	objs := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}},
	}
	// A stash of the Secret's keys exists only while a Secret is recreated;
	// the cache is enough to find it (see dropStash).
	st := &corev1.Secret{}
	if err := r.client.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: StashName(s.claim.UID)}, st); err == nil {
		objs = append(objs, st)
	}
	if ob != nil {
		objs = append(objs, ob)
	}
	allGone := true
	for _, obj := range objs {
		gone, err := r.deleteOwned(ctx, s, obj)
		if err != nil {
			return r.quiet(ctx, err)
		}
		allGone = allGone && gone
	}
	if err := r.hit(s, crashpoint.ClaimObjectsDeleted); err != nil {
		return reconcile.Result{}, err
	}
	if !allGone {
		return reconcile.Result{RequeueAfter: goneRetry}, nil
	}
	return reconcile.Result{}, nil
}

// releaseConfigMap removes the finalizer from the claim's ConfigMap where
// lib-bucket-provisioner, which shares it, put it. The cache is asked
// alone: it holds every ConfigMap of ours, and costs no request.
func (r *Reconciler) releaseConfigMap(ctx context.Context, s *scope) error {
	cm := &corev1.ConfigMap{}
	err := r.client.Get(ctx, client.ObjectKeyFromObject(s.claim), cm)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("get config map: %w", err)
	case !metav1.IsControlledBy(cm, s.claim):
		return nil
	}
	if err := r.removeFinalizer(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove finalizer of %s: %w", client.ObjectKeyFromObject(cm), err)
	}
	return nil
}

// cleanBackend revokes the claim's credential and deletes its bucket when
// the recorded policy says so and the bucket is the claim's. A missing user
// or bucket is success; one that is not ours is left alone.
//
// The credential goes first, and a failed revocation holds the bucket back:
// a deleted bucket frees its name, and a claim that names the same bucket
// (spec.bucketName) could be given it while the old key's policy, which
// names the bucket, still works (TestFailedRevokeKeepsBucket). Running the
// two at once was tried and measured no faster on the embedded server, whose
// lifecycle is CPU-bound (docs/performance.md).
//
// Which bucket or user is the claim's to delete, marked or left unmarked by
// a crash, is internal/ensure's rule, given what the record holds: the
// attempts, and for a Bound ObjectBucket that both were created and
// marked. One of those without the claim's mark is ensure.ErrMarkLost:
// the deletion stops there, deleting nothing more, until a person puts the
// mark back or removes the resource.
func (r *Reconciler) cleanBackend(ctx context.Context, s *scope, ob *obv1.ObjectBucket) error {
	p := planOf(ob)
	if p.user != "" && p.owner != "" {
		bctx, cancel := backendCtx(ctx)
		err := ensure.RevokeUser(bctx, r.driver, p.user, p.owner, p.bucket, creation(ob, p.userAttempted))
		cancel()
		switch {
		case errors.Is(err, driver.ErrOwnedByOther):
			r.event(s, nil, corev1.EventTypeWarning, "UserNotOurs", "Delete", "Backend user %s is not this claim's; left in place", p.user)
		case errors.Is(err, ensure.ErrMarkLost):
			return fmt.Errorf("revoke credential: %w; nothing was deleted: put the owner mark back, or delete the user yourself (the deletion is retried every minute)", err)
		case err != nil:
			return fmt.Errorf("revoke credential: %w", err)
		}
		if err := r.hit(s, crashpoint.ClaimCredentialRevoked); err != nil {
			return err
		}
	}
	if !p.owned || p.reclaim == obv1.ReclaimRetain || p.bucket == "" {
		return nil
	}
	bctx, cancel := backendCtx(ctx)
	err := ensure.DeleteBucket(bctx, r.driver, p.bucket, p.owner, true, creation(ob, p.bucketAttempted))
	cancel()
	switch {
	case errors.Is(err, driver.ErrOwnedByOther):
		// A bucket that existed before the claim (a failed provision of
		// a taken name): never deleted.
		r.event(s, nil, corev1.EventTypeWarning, "BucketNotOurs", "Delete", "Bucket %s is not this claim's; left in place", p.bucket)
	case errors.Is(err, ensure.ErrMarkLost):
		return fmt.Errorf("delete bucket: %w; nothing was deleted: put the owner mark back, or delete the bucket yourself (the deletion is retried every minute)", err)
	case err != nil:
		return fmt.Errorf("delete bucket %q: %w", p.bucket, err)
	}
	return r.hit(s, crashpoint.ClaimBucketDeleted)
}

// getCachedFirst reads key from the cache and, when the cache has no such
// object, from the API server: the cache may not have seen an object
// created a moment ago, and a Secret or ConfigMap without our label is
// never in it.
func (r *Reconciler) getCachedFirst(ctx context.Context, key client.ObjectKey, obj client.Object) (bool, error) {
	err := r.client.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		err = r.reader.Get(ctx, key, obj)
	}
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("get %s: %w", key, err)
	}
	return true, nil
}

// deleteOwned deletes obj if it is this claim's (or, for the ObjectBucket,
// bound to it), dropping our finalizer first, and reports whether the API
// server says it is gone.
//
// Two requests in the usual case: the finalizer patch, whose answer shows
// whether any finalizer is left, and a delete preconditioned on the
// resourceVersion that answer carries. None of these kinds has a grace
// period, so a successful delete of an object without finalizers removes it
// in that request: the delete's answer says it is gone, and no Get has to
// ask again. An object still held (someone else's finalizer) is asked
// about with a Get on later passes.
func (r *Reconciler) deleteOwned(ctx context.Context, s *scope, obj client.Object) (bool, error) {
	if _, isOB := obj.(*obv1.ObjectBucket); !isOB {
		found, err := r.getCachedFirst(ctx, client.ObjectKeyFromObject(obj), obj)
		if err != nil || !found {
			return !found, err
		}
		if !metav1.IsControlledBy(obj, s.claim) {
			return true, nil // a user's object: not ours to delete
		}
	}
	if err := r.removeFinalizer(ctx, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, fmt.Errorf("remove finalizer of %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		return r.gone(ctx, obj) // deleted before, held by another finalizer
	}
	uid, rv := obj.GetUID(), obj.GetResourceVersion()
	err := r.client.Delete(ctx, obj, client.Preconditions{UID: &uid, ResourceVersion: &rv})
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("delete %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	return len(obj.GetFinalizers()) == 0, nil
}
