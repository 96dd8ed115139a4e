package objectbucket

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	obv1 "github.com/bucketbroker/bucketbroker/api/objectbucket/v1alpha1"
	"github.com/bucketbroker/bucketbroker/internal/catalog"
	"github.com/bucketbroker/bucketbroker/internal/crashpoint"
	"github.com/bucketbroker/bucketbroker/internal/ensure"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

type phaseFunc func(context.Context, *scope) (reconcile.Result, error)

// reconcileNormal drives a live claim to Bound. Every phase re-derives what
// it needs from what exists; a phase that cannot finish ends the pass.
func (r *Reconciler) reconcileNormal(ctx context.Context, s *scope) (reconcile.Result, error) {
	for _, phase := range []phaseFunc{
		r.plan, r.checkQuota, r.ensureClaimMeta, r.ensureObjectBucket, r.ensureBucket,
		r.ensureSecret, r.ensureConfigMap, r.bind,
	} {
		res, err := phase(ctx, s)
		if err != nil {
			if s.stopped {
				return reconcile.Result{}, err
			}
			return r.quiet(ctx, err)
		}
		if !res.IsZero() || s.phase == obv1.PhaseFailed || s.stopped {
			return res, nil
		}
	}
	return reconcile.Result{}, nil
}

// plan finds the claim's ObjectBucket (by its UID-derived name, so a pruned
// spec.objectBucketName changes nothing), checks that it is bound to the
// claim (boundUID: by label, so a pruned spec.claimRef changes nothing
// either) and takes the names from its record, or derives them for a claim
// not provisioned yet.
func (r *Reconciler) plan(ctx context.Context, s *scope) (reconcile.Result, error) {
	ob := &obv1.ObjectBucket{}
	err := r.client.Get(ctx, types.NamespacedName{Name: NameForClaim(s.claim.UID)}, ob)
	switch {
	case apierrors.IsNotFound(err):
		ob = nil
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("get object bucket: %w", err)
	}
	if ob != nil {
		if boundUID(ob) != s.claim.UID {
			s.fail(ReasonObjectConflict, fmt.Sprintf("ObjectBucket %s exists and is bound to another claim", ob.Name))
			return reconcile.Result{}, nil
		}
		s.ob, s.plan = ob, planOf(ob)
		return reconcile.Result{}, nil
	}
	if s.class == nil {
		s.reason, s.message = ReasonInvalid, fmt.Sprintf("StorageClass %q not found", s.claim.Spec.StorageClassName)
		return reconcile.Result{RequeueAfter: foreignRetry}, nil
	}
	s.plan = r.derivePlan(s)
	return reconcile.Result{}, nil
}

// derivePlan chooses the names of a claim not provisioned yet.
func (r *Reconciler) derivePlan(s *scope) plan {
	c, uid := s.claim, string(s.claim.UID)
	p := plan{
		user:    driver.UserName(r.opts.Prefix, claimKind, uid),
		owner:   driver.OwnerMark(claimKind, uid),
		owned:   true,
		reclaim: obv1.ReclaimDelete,
	}
	if rp := s.class.ReclaimPolicy; rp != nil && *rp == corev1.PersistentVolumeReclaimRetain {
		p.reclaim = obv1.ReclaimRetain
	}
	p.adoptUnmarked = writtenByOldProvisioner(c)
	switch {
	case s.class.Parameters[ParameterBucketName] != "":
		// Brownfield: access to an existing bucket that is not ours.
		p.bucket, p.owned, p.reclaim, p.adoptUnmarked = s.class.Parameters[ParameterBucketName], false, obv1.ReclaimRetain, false
	case c.Annotations[AnnotationBucketName] != "":
		p.bucket = c.Annotations[AnnotationBucketName]
	case c.Spec.BucketName != "":
		p.bucket = c.Spec.BucketName
	case c.Spec.GenerateBucketName != "":
		p.bucket = generatedBucketName(c.Spec.GenerateBucketName, c.UID)
	default:
		p.bucket = driver.BucketName(r.opts.Prefix, claimKind, uid)
	}
	return p
}

// writtenByOldProvisioner reports a claim whose bucketName was filled in by
// an earlier provisioner from its generateBucketName (lib-bucket-provisioner
// did so): its bucket was generated for this claim, so it is adopted even
// without our owner mark, rather than refused as someone else's exact name.
func writtenByOldProvisioner(c *obv1.ObjectBucketClaim) bool {
	s := c.Spec
	if s.GenerateBucketName == "" || s.BucketName == "" || !strings.HasPrefix(s.BucketName, s.GenerateBucketName) {
		return false
	}
	return s.ObjectBucketName != "" || c.Status.Phase != "" || controllerutil.ContainsFinalizer(c, Finalizer)
}

// checkQuota reads the limits the claim's additionalConfig asks for
// (ConfigMaxSize, ConfigMaxObjects) and fails the claim, before anything
// is made or changed, on a limit that is not a positive whole number, one
// the driver cannot enforce, or one on a bucket that is not the claim's
// own: a limit asked for is applied or refused, never ignored.
func (r *Reconciler) checkQuota(_ context.Context, s *scope) (reconcile.Result, error) {
	q, err := claimQuota(s.claim)
	if err == nil && !q.IsZero() && !s.plan.owned {
		err = fmt.Errorf("a quota limits a bucket of the claim's own, and bucket %q is StorageClass %q's", s.plan.bucket, s.claim.Spec.StorageClassName)
	}
	if err == nil {
		err = driver.CheckQuota(r.driver, q)
	}
	if err != nil {
		msg := "additionalConfig: " + err.Error()
		s.fail(ReasonInvalid, msg)
		r.event(s, nil, corev1.EventTypeWarning, ReasonInvalid, "Provision", "%s", msg)
		return reconcile.Result{}, nil
	}
	s.quota = q
	if s.ob == nil {
		s.plan.quota = q // recorded with the ObjectBucket, applied with the bucket
	}
	return reconcile.Result{}, nil
}

// claimQuota reads the claim's quota from its additionalConfig.
func claimQuota(c *obv1.ObjectBucketClaim) (driver.Quota, error) {
	var q driver.Quota
	if v := c.Spec.AdditionalConfig[ConfigMaxSize]; v != "" {
		n, err := catalog.ParseSize(v)
		if err != nil {
			return q, fmt.Errorf("%s: %w", ConfigMaxSize, err)
		}
		q.MaxSize = n
	}
	if v := c.Spec.AdditionalConfig[ConfigMaxObjects]; v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return q, fmt.Errorf("%s: %q is not a positive whole number", ConfigMaxObjects, v)
		}
		q.MaxObjects = n
	}
	return q, nil
}

// ensureClaimMeta puts the finalizer, the provisioner and the chosen bucket
// name on the claim in one write, before anything exists elsewhere: the
// bucket name is then fixed for every retry.
func (r *Reconciler) ensureClaimMeta(ctx context.Context, s *scope) (reconcile.Result, error) {
	c := s.claim
	if controllerutil.ContainsFinalizer(c, Finalizer) &&
		c.Annotations[AnnotationProvisioner] == r.opts.ProvisionerName &&
		c.Annotations[AnnotationBucketName] == s.plan.bucket {
		return reconcile.Result{}, nil
	}
	base := c.DeepCopy()
	controllerutil.AddFinalizer(c, Finalizer)
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[AnnotationProvisioner] = r.opts.ProvisionerName
	c.Annotations[AnnotationBucketName] = s.plan.bucket
	// A CRD that prunes this field drops it; nothing depends on it.
	c.Spec.ObjectBucketName = NameForClaim(c.UID)
	if err := r.client.Patch(ctx, c, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), ignoreUnknown); err != nil {
		return reconcile.Result{}, fmt.Errorf("patch claim: %w", err)
	}
	if c.Spec.ObjectBucketName == "" {
		r.pruned(ctx, s, "PatchClaim", crdClaims, prunedField{"spec.objectBucketName",
			"the ObjectBucket is found by its name, obc-<claim UID>; tools that read spec.objectBucketName do not see it"})
	}
	r.written.changed(c.UID, c, base.ResourceVersion)
	s.base = c.DeepCopy()
	return reconcile.Result{}, r.hit(s, crashpoint.ClaimPatched)
}

// ensureObjectBucket writes the ObjectBucket, the durable record of the
// claim's names, owner mark and reclaim policy, before any backend change.
// The look at the names comes first, so that the attempt flags go into the
// same Create.
func (r *Reconciler) ensureObjectBucket(ctx context.Context, s *scope) (reconcile.Result, error) {
	if s.ob != nil {
		return r.recordAttempts(ctx, s)
	}
	t, err := r.lookFirst(ctx, s)
	if err != nil {
		return reconcile.Result{}, err
	}
	c, p := s.claim, s.plan
	ob := &obv1.ObjectBucket{
		ObjectMeta: metav1.ObjectMeta{
			Name:        NameForClaim(c.UID),
			Labels:      map[string]string{LabelProvisioner: r.label, LabelClaimUID: string(c.UID)},
			Annotations: recordAnnotations(c, p),
			Finalizers:  []string{Finalizer},
		},
		Spec: obv1.ObjectBucketSpec{
			StorageClassName: c.Spec.StorageClassName,
			ReclaimPolicy:    p.reclaim,
			ClaimRef: &obv1.ClaimReference{
				APIVersion: obv1.GroupVersion.String(), Kind: obv1.ObjectBucketClaimKind,
				Namespace: c.Namespace, Name: c.Name, UID: c.UID,
			},
			Endpoint: &obv1.Endpoint{
				BucketHost: r.opts.BucketHost, BucketPort: r.opts.BucketPort, BucketName: p.bucket,
				Region: r.opts.Region, SubRegion: r.opts.SubRegion, AdditionalConfig: c.Spec.AdditionalConfig,
			},
			AdditionalState: recordOf(p),
		},
	}
	sent := ob.DeepCopy()
	// A Create that finds the ObjectBucket there already (a cache behind)
	// fails, so a look made without knowing the record is never acted on.
	if err := r.client.Create(ctx, ob, ignoreUnknown); err != nil {
		return reconcile.Result{}, fmt.Errorf("create object bucket: %w", err)
	}
	r.written.created(c.UID, ob)
	r.checkObjectBucket(ctx, s, sent, ob)
	s.ob = ob
	if err := r.hit(s, crashpoint.ClaimObjectBucketCreated); err != nil {
		return reconcile.Result{}, err
	}
	if t != nil {
		return r.refuse(s, t)
	}
	return reconcile.Result{}, nil
}

// recordAttempts gives an ObjectBucket that does not hold both attempt
// flags (one created while a name was taken) the look a new one gets, and records the flags it earns with a
// patch preconditioned on the ObjectBucket's resourceVersion, before any
// Ensure call. A Bound claim makes no backend call: its bucket and user
// carry its mark already.
func (r *Reconciler) recordAttempts(ctx context.Context, s *scope) (reconcile.Result, error) {
	if bound(s.ob) {
		return reconcile.Result{}, nil
	}
	before := s.plan
	t, err := r.lookFirst(ctx, s)
	if err != nil {
		return reconcile.Result{}, err
	}
	if s.plan.bucketAttempted != before.bucketAttempted || s.plan.userAttempted != before.userAttempted {
		base := s.ob.DeepCopy()
		flags := map[string]string{
			stateBucketAttempted: strconv.FormatBool(s.plan.bucketAttempted),
			stateUserAttempted:   strconv.FormatBool(s.plan.userAttempted),
		}
		st := maps.Clone(s.ob.Spec.AdditionalState)
		if st == nil {
			st = map[string]string{}
		}
		a := maps.Clone(s.ob.Annotations)
		if a == nil {
			a = map[string]string{}
		}
		maps.Copy(st, flags)
		maps.Copy(a, flags)
		s.ob.Spec.AdditionalState, s.ob.Annotations = st, a
		if err := r.client.Patch(ctx, s.ob, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), ignoreUnknown); err != nil {
			return reconcile.Result{}, fmt.Errorf("record attempts on object bucket: %w", err)
		}
		r.written.changed(s.claim.UID, s.ob, base.ResourceVersion)
	}
	if t != nil {
		return r.refuse(s, t)
	}
	return reconcile.Result{}, nil
}

// taken is a name the claim was about to create that is someone else's.
type taken struct {
	reason, message string
}

// lookFirst looks (one Observe) at the bucket and user names whose
// attempt the record does not hold yet, before anything is created under
// them, and sets the plan's flags for those that are free or already carry
// the claim's mark. A name that is someone else's, marked or not, keeps its
// flag unset and is returned: the claim must not create, adopt or change
// it. A brownfield bucket is never the claim's, and an old provisioner's is
// adopted on that evidence alone (adoptUnmarked): neither is looked at
// here.
func (r *Reconciler) lookFirst(ctx context.Context, s *scope) (*taken, error) {
	p := &s.plan
	n := ensure.Names{Owner: p.owner}
	if p.owned && !p.adoptUnmarked && !p.bucketAttempted {
		n.Bucket = p.bucket
	}
	if !p.userAttempted {
		n.User = p.user
	}
	if n.Bucket == "" && n.User == "" {
		return nil, nil
	}
	bctx, cancel := backendCtx(ctx)
	v, err := ensure.Look(bctx, r.driver, n)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("look at bucket %q and user %q before creating them: %w", n.Bucket, n.User, err)
	}
	var t *taken
	if n.User != "" {
		if v.UserFree {
			p.userAttempted = true
		} else {
			t = &taken{ReasonUserConflict, fmt.Sprintf("backend user %q exists and is not this claim's (%s); it was left untouched",
				p.user, markNote(v.UserOwner))}
		}
	}
	if n.Bucket != "" {
		if v.BucketFree {
			p.bucketAttempted = true
		} else {
			t = &taken{ReasonBucketConflict, fmt.Sprintf("bucket %q exists and is not this claim's (%s); it was left untouched",
				p.bucket, markNote(v.BucketOwner))}
		}
	}
	return t, nil
}

func markNote(owner string) string {
	if owner == "" {
		return "it has no owner mark, and the ObjectBucket records no attempt of the claim to create it"
	}
	return fmt.Sprintf("it carries owner mark %q", owner)
}

// refuse ends the pass with the claim Failed on a name that is someone
// else's, and looks again later: the name may be freed.
func (r *Reconciler) refuse(s *scope, t *taken) (reconcile.Result, error) {
	s.fail(t.reason, t.message)
	r.event(s, nil, corev1.EventTypeWarning, t.reason, "Provision", "%s", t.message)
	return reconcile.Result{RequeueAfter: foreignRetry}, nil
}

func bound(ob *obv1.ObjectBucket) bool { return ob != nil && ob.Status.Phase == obv1.PhaseBound }

// creation is what the ObjectBucket ob says of the creation of the claim's
// bucket or user, attempted being its attempt flag: a Bound ObjectBucket's
// were created and marked, and an unmarked one is someone's change, never
// adopted or deleted (internal/ensure).
func creation(ob *obv1.ObjectBucket, attempted bool) ensure.Creation {
	return ensure.CreationOf(attempted, bound(ob))
}

// ensureBucket creates (or adopts) the claim's bucket with its quota, or
// checks that a brownfield bucket exists. A bound claim makes no backend
// call unless its quota changed (ensureQuota).
func (r *Reconciler) ensureBucket(ctx context.Context, s *scope) (reconcile.Result, error) {
	if bound(s.ob) {
		return r.ensureQuota(ctx, s)
	}
	p := s.plan
	bctx, cancel := backendCtx(ctx)
	defer cancel()
	if !p.owned {
		obs, err := r.driver.Observe(bctx, driver.ObserveRequest{Bucket: p.bucket})
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("observe bucket %q: %w", p.bucket, err)
		}
		if !obs.BucketExists {
			s.fail(ReasonBucketMissing, fmt.Sprintf("bucket %q named by StorageClass %q does not exist", p.bucket, s.claim.Spec.StorageClassName))
			return reconcile.Result{RequeueAfter: foreignRetry}, nil
		}
		return reconcile.Result{}, nil
	}
	// An unmarked bucket of the claim's name is the claim's own when the
	// record holds the attempt (internal/ensure), or when an old
	// provisioner generated it for the claim.
	err := ensure.Bucket(bctx, r.driver, driver.BucketSpec{Name: p.bucket, Owner: p.owner, AdoptUnmarked: p.adoptUnmarked, Quota: s.quota},
		creation(s.ob, p.bucketAttempted))
	switch {
	case errors.Is(err, driver.ErrOwnedByOther):
		s.fail(ReasonBucketConflict, fmt.Sprintf("bucket %q exists and is not this claim's", p.bucket))
		r.event(s, nil, corev1.EventTypeWarning, ReasonBucketConflict, "Provision", "Bucket %s exists and is not this claim's", p.bucket)
		return reconcile.Result{}, nil
	case driver.Permanent(err):
		s.fail(ReasonInvalid, err.Error())
		return reconcile.Result{}, nil
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("ensure bucket %q: %w", p.bucket, err)
	}
	return reconcile.Result{}, r.hit(s, crashpoint.ClaimBucketCreated)
}

// ensureQuota applies the quota of a bound claim whose additionalConfig
// changed it, then records it in the ObjectBucket (with a patch
// preconditioned on its resourceVersion). A quota as recorded costs no
// backend call; a crash between the two writes applies it again.
func (r *Reconciler) ensureQuota(ctx context.Context, s *scope) (reconcile.Result, error) {
	p := s.plan
	if !p.owned || s.quota == p.quota {
		return reconcile.Result{}, nil
	}
	bctx, cancel := backendCtx(ctx)
	err := ensure.Bucket(bctx, r.driver, driver.BucketSpec{Name: p.bucket, Owner: p.owner, Quota: s.quota}, ensure.Created)
	cancel()
	switch {
	case driver.Permanent(err):
		s.fail(ReasonInvalid, err.Error())
		return reconcile.Result{}, nil
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("apply quota (%s) to bucket %q: %w", s.quota, p.bucket, err)
	}
	base := s.ob.DeepCopy()
	a, st := maps.Clone(s.ob.Annotations), maps.Clone(s.ob.Spec.AdditionalState)
	if st == nil {
		st = map[string]string{}
	}
	setQuota(a, s.quota)
	setQuota(st, s.quota)
	s.ob.Annotations, s.ob.Spec.AdditionalState = a, st
	if e := s.ob.Spec.Endpoint; e != nil {
		e.AdditionalConfig = maps.Clone(s.claim.Spec.AdditionalConfig)
	}
	if err := r.client.Patch(ctx, s.ob, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}), ignoreUnknown); err != nil {
		return reconcile.Result{}, fmt.Errorf("record quota on object bucket: %w", err)
	}
	r.written.changed(s.claim.UID, s.ob, base.ResourceVersion)
	s.plan.quota = s.quota
	r.event(s, nil, corev1.EventTypeNormal, ReasonQuotaApplied, "Update", "Bucket %s quota is now %s", p.bucket, s.quota)
	return reconcile.Result{}, nil
}

// ownership of a Secret or ConfigMap named like the claim.
type ownership int

const (
	absent ownership = iota
	ours
	foreign
	terminating // ours, being deleted while the claim lives (drift)
)

// lookup reads the object named like the claim: from the label-selected
// cache, and from the API server when the cache has none, because a user's
// object without our label is invisible to the cache.
func (r *Reconciler) lookup(ctx context.Context, s *scope, obj client.Object) (ownership, error) {
	found, err := r.getCachedFirst(ctx, client.ObjectKeyFromObject(s.claim), obj)
	if err != nil || !found {
		return absent, err
	}
	return ownershipOf(s, obj), nil
}

// lookupCached reads the object named like the claim from the cache alone:
// a miss is "absent", which the Create that follows confirms or refutes.
func (r *Reconciler) lookupCached(ctx context.Context, s *scope, obj client.Object) (ownership, error) {
	key := client.ObjectKeyFromObject(s.claim)
	err := r.client.Get(ctx, key, obj)
	switch {
	case apierrors.IsNotFound(err):
		return absent, nil
	case err != nil:
		return absent, fmt.Errorf("get %s: %w", key, err)
	}
	return ownershipOf(s, obj), nil
}

// ownershipOf classifies obj, which exists.
func ownershipOf(s *scope, obj client.Object) ownership {
	switch {
	case !metav1.IsControlledBy(obj, s.claim):
		return foreign
	case !obj.GetDeletionTimestamp().IsZero():
		return terminating
	}
	return ours
}

// put creates obj (create) or updates it, and records the write so that a
// pass on a cache behind it waits (writeSet).
func (r *Reconciler) put(ctx context.Context, s *scope, obj client.Object, create bool) error {
	if create {
		if err := r.client.Create(ctx, obj); err != nil {
			return err
		}
		r.written.created(s.claim.UID, obj)
		return nil
	}
	before := obj.GetResourceVersion()
	if err := r.client.Update(ctx, obj); err != nil {
		return err
	}
	r.written.changed(s.claim.UID, obj, before)
	return nil
}

// stamp makes obj one of the claim's: label, controller reference, and our
// finalizer on a Secret only (keepsFinalizer). A ConfigMap that carries
// the finalizer (lib-bucket-provisioner put it on ConfigMaps too) has it
// removed here.
func (r *Reconciler) stamp(s *scope, obj client.Object) {
	obj.SetName(s.claim.Name)
	obj.SetNamespace(s.claim.Namespace)
	l := obj.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[LabelProvisioner] = r.label
	obj.SetLabels(l)
	if keepsFinalizer(obj) {
		controllerutil.AddFinalizer(obj, Finalizer)
	} else {
		controllerutil.RemoveFinalizer(obj, Finalizer)
	}
	blockOwnerDeletion := true
	isController := true
	ref := metav1.OwnerReference{
		APIVersion: obv1.GroupVersion.String(), Kind: obv1.ObjectBucketClaimKind,
		Name: s.claim.Name, UID: s.claim.UID, Controller: &isController, BlockOwnerDeletion: &blockOwnerDeletion,
	}
	refs := obj.GetOwnerReferences()
	for i := range refs {
		if refs[i].UID == s.claim.UID {
			refs[i] = ref
			obj.SetOwnerReferences(refs)
			return
		}
	}
	obj.SetOwnerReferences(append(refs, ref))
}

// stamped reports whether obj already carries everything stamp adds.
func (r *Reconciler) stamped(obj client.Object) bool {
	return obj.GetLabels()[LabelProvisioner] == r.label && controllerutil.ContainsFinalizer(obj, Finalizer) == keepsFinalizer(obj)
}

// keepsFinalizer reports whether our finalizer belongs on obj: on a Secret,
// which alone holds the claim's keys, so that one deleted by someone is
// held until its keys are copied and it is recreated with them. A
// ConfigMap holds only what the ObjectBucket records: one deleted is
// recreated from it (drift repair), and its controller reference lets the
// garbage collector remove it with the claim, so a finalizer would cost a
// request per deletion and hold nothing that matters.
func keepsFinalizer(obj client.Object) bool {
	_, ok := obj.(*corev1.Secret)
	return ok
}

// release lets a terminating object of ours go (drops our finalizer) and
// waits until a Get says it is gone, so that it can be created again.
func (r *Reconciler) release(ctx context.Context, obj client.Object) (gone bool, err error) {
	if err := r.removeFinalizer(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("remove finalizer of %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	return r.gone(ctx, obj)
}

// removeFinalizer drops our finalizer from obj with a JSON patch that
// tests the entry it removes: it needs no resourceVersion, so an object
// read from a cache a write behind is not a conflict, and it never drops
// another controller's finalizer. obj is updated from the answer. A stale
// index fails the test (Invalid); the pass is retried.
func (r *Reconciler) removeFinalizer(ctx context.Context, obj client.Object) error {
	i := slices.Index(obj.GetFinalizers(), Finalizer)
	if i < 0 {
		return nil
	}
	patch := fmt.Sprintf(`[{"op":"test","path":"/metadata/finalizers/%d","value":%q},{"op":"remove","path":"/metadata/finalizers/%d"}]`, i, Finalizer, i)
	err := r.client.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, []byte(patch)))
	if apierrors.IsInvalid(err) {
		return apierrors.NewConflict(schema.GroupResource{}, obj.GetName(), err)
	}
	return err
}

// gone asks the API server (not the cache) whether obj is gone.
func (r *Reconciler) gone(ctx context.Context, obj client.Object) (bool, error) {
	probe := obj.DeepCopyObject().(client.Object)
	err := r.reader.Get(ctx, client.ObjectKeyFromObject(obj), probe)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("get %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	return false, nil
}

// ensureSecret makes the claim's credential and its Secret. The Secret is
// the record of the key: its AWS_ACCESS_KEY_ID is the key EnsureCredential
// keeps, and any other key of the user (one made by a pass that crashed
// before writing the Secret) is deleted.
//
// While the claim is provisioned the Secret is looked for in the cache
// alone (findSecret), and a miss is created at once: the Create is the
// look. The cache holds every Secret of ours there is (writeSet keeps the
// pass from running on a cache behind this process's own writes), so what
// a Create can still find is a Secret without our label, a user's: the key
// just made for it is revoked before the claim goes Failed.
//
// The steps: a Secret of ours that someone deleted is recreated with its
// keys (repairSecret, drift repair, no backend call); otherwise the key
// the claim recorded (recordedKeys) is made the user's only one, or a new
// one is made (ensure.Credential), and written (writeSecret).
func (r *Reconciler) ensureSecret(ctx context.Context, s *scope) (reconcile.Result, error) {
	sec := &corev1.Secret{}
	own, err := r.findSecret(ctx, s, sec)
	if err != nil {
		return reconcile.Result{}, err
	}
	switch own {
	case foreign:
		return r.secretTaken(s)
	case terminating:
		return r.repairSecret(ctx, s, sec)
	case ours:
		if bound(s.ob) && r.holdsKeys(sec) {
			return reconcile.Result{}, r.dropStash(ctx, s)
		}
	}
	recorded, err := r.recordedKeys(ctx, s, own, sec)
	if err != nil {
		return reconcile.Result{}, err
	}
	p := s.plan
	bctx, cancel := backendCtx(ctx)
	cred, err := ensure.Credential(bctx, r.driver, driver.CredentialSpec{
		UserName: p.user, Owner: p.owner, Bucket: p.bucket, Access: driver.AccessReadWrite,
		Keys: driver.ReplaceKeys, KeyID: string(recorded[KeyAccessKeyID]),
	}, creation(s.ob, p.userAttempted))
	cancel()
	switch {
	case errors.Is(err, driver.ErrOwnedByOther), errors.Is(err, ensure.ErrMarkLost):
		return r.userTaken(s, err)
	case err != nil:
		return reconcile.Result{}, fmt.Errorf("ensure credential: %w", err)
	}
	if cred.SecretAccessKey == "" {
		// The recorded key is live: the Secret holds it, or gets it back.
		if own == ours && r.stamped(sec) {
			return reconcile.Result{}, nil
		}
		return r.writeSecret(ctx, s, own, sec, recorded)
	}
	if err := r.hit(s, crashpoint.ClaimKeyCreated); err != nil {
		return reconcile.Result{}, err
	}
	return r.writeSecret(ctx, s, own, sec, map[string][]byte{
		KeyAccessKeyID: []byte(cred.AccessKeyID), KeySecretAccessKey: []byte(cred.SecretAccessKey),
	})
}

// holdsKeys reports whether sec, the claim's Secret, holds a key pair and
// carries everything stamp adds: a bound claim's Secret needs nothing more.
func (r *Reconciler) holdsKeys(sec *corev1.Secret) bool {
	return len(sec.Data[KeyAccessKeyID]) > 0 && len(sec.Data[KeySecretAccessKey]) > 0 && r.stamped(sec)
}

// recordedKeys returns the keys the claim has recorded: its Secret's, or,
// for a bound claim whose Secret is gone, those a repair cut short by a
// crash left in the stash. Nothing recorded is an empty map.
func (r *Reconciler) recordedKeys(ctx context.Context, s *scope, own ownership, sec *corev1.Secret) (map[string][]byte, error) {
	if own != absent || !bound(s.ob) {
		return sec.Data, nil
	}
	st, err := r.stash(ctx, s)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return sec.Data, nil
	}
	return st.Data, nil
}

// repairSecret recreates the claim's Secret, deleted by someone while the
// claim lives, with the same keys, which only that object holds. They are
// copied to the stash first, because the object is gone once our finalizer
// is: a crash before the new Secret is written finds them there.
func (r *Reconciler) repairSecret(ctx context.Context, s *scope, sec *corev1.Secret) (reconcile.Result, error) {
	keep := sec.Data
	if err := r.stashKeys(ctx, s, keep); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.hit(s, crashpoint.ClaimKeysStashed); err != nil {
		return reconcile.Result{}, err
	}
	gone, err := r.release(ctx, sec)
	if err != nil || !gone {
		return reconcile.Result{RequeueAfter: goneRetry}, err
	}
	if err := r.hit(s, crashpoint.ClaimSecretReleased); err != nil {
		return reconcile.Result{}, err
	}
	sec = &corev1.Secret{Type: corev1.SecretTypeOpaque, Data: keep}
	r.stamp(s, sec)
	if err := r.put(ctx, s, sec, true); err != nil {
		return reconcile.Result{}, fmt.Errorf("recreate secret: %w", err)
	}
	r.event(s, sec, corev1.EventTypeNormal, "Recreated", "Repair", "Secret %s was deleted and is recreated", sec.Name)
	if err := r.hit(s, crashpoint.ClaimSecretWritten); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, r.dropStash(ctx, s)
}

// writeSecret writes data, the claim's keys, to its Secret: creates it when
// it is absent (own), else updates sec. A Create that finds the name taken
// is secretNameTaken's.
func (r *Reconciler) writeSecret(ctx context.Context, s *scope, own ownership, sec *corev1.Secret, data map[string][]byte) (reconcile.Result, error) {
	var err error
	if own == absent {
		sec = &corev1.Secret{Type: corev1.SecretTypeOpaque, Data: data}
		r.stamp(s, sec)
		err = r.put(ctx, s, sec, true)
		if apierrors.IsAlreadyExists(err) {
			return r.secretNameTaken(ctx, s, data)
		}
	} else {
		sec.Data = data
		r.stamp(s, sec)
		err = r.put(ctx, s, sec, false)
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("write secret: %w", err)
	}
	if err := r.hit(s, crashpoint.ClaimSecretWritten); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, r.dropStash(ctx, s)
}

// userTaken ends the pass with the claim Failed on a backend user that is
// not the claim's (EnsureCredential refused it: internal/ensure).
func (r *Reconciler) userTaken(s *scope, err error) (reconcile.Result, error) {
	s.fail(ReasonUserConflict, err.Error())
	r.event(s, nil, corev1.EventTypeWarning, ReasonUserConflict, "Provision", "Backend user %s is not this claim's", s.plan.user)
	return reconcile.Result{}, nil
}

// StashName names the Secret, in the claim's namespace, that holds the
// claim's keys while its Secret is recreated.
func StashName(uid types.UID) string { return NameForClaim(uid) + "-keys" }

// stash returns the claim's stash Secret, or nil when there is none of
// ours: from the cache (it carries our label), else from the API server.
func (r *Reconciler) stash(ctx context.Context, s *scope) (*corev1.Secret, error) {
	st := &corev1.Secret{}
	key := types.NamespacedName{Namespace: s.claim.Namespace, Name: StashName(s.claim.UID)}
	found, err := r.getCachedFirst(ctx, key, st)
	if err != nil || !found || !metav1.IsControlledBy(st, s.claim) || len(st.Data[KeySecretAccessKey]) == 0 {
		return nil, err
	}
	return st, nil
}

// stashKeys writes data to the claim's stash Secret (labeled, controlled
// by the claim, no finalizer: garbage collection removes it with the claim).
func (r *Reconciler) stashKeys(ctx context.Context, s *scope, data map[string][]byte) error {
	st, err := r.stash(ctx, s)
	if err != nil {
		return err
	}
	if st != nil && string(st.Data[KeyAccessKeyID]) == string(data[KeyAccessKeyID]) {
		return nil
	}
	create := st == nil
	if create {
		st = &corev1.Secret{Type: corev1.SecretTypeOpaque}
	}
	st.Data = data
	r.stamp(s, st)
	st.Name = StashName(s.claim.UID)
	controllerutil.RemoveFinalizer(st, Finalizer)
	err = r.put(ctx, s, st, create)
	if create && apierrors.IsAlreadyExists(err) {
		// Someone else's Secret of that name (the stash of ours would have
		// been found): the repair goes on without a copy, as it did before
		// there was one, and says so.
		r.event(s, nil, corev1.EventTypeWarning, "StashNameTaken", "Repair",
			"Secret %s is not this claim's: Secret %s is recreated without a copy of its keys", st.Name, s.claim.Name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("stash the keys of Secret %s: %w", s.claim.Name, err)
	}
	return nil
}

// dropStash deletes the claim's stash Secret once its Secret holds the
// keys. Only the cache is asked: a stash exists only while a Secret is
// recreated, and this process wrote it or its cache listed it at start.
func (r *Reconciler) dropStash(ctx context.Context, s *scope) error {
	st := &corev1.Secret{}
	err := r.client.Get(ctx, types.NamespacedName{Namespace: s.claim.Namespace, Name: StashName(s.claim.UID)}, st)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("get the stash of Secret %s: %w", s.claim.Name, err)
	}
	_, err = r.deleteOwned(ctx, s, st)
	return err
}

// findSecret reads the Secret named like the claim. A claim being
// provisioned reads the cache alone (see ensureSecret). A bound claim, or
// one a user's Secret blocked before, asks the API server about a miss: a
// bound claim's key must not be replaced because the cache lost its Secret
// (a user removed our label), and a blocked claim must not make a key,
// revoke it and fail again on each retry.
func (r *Reconciler) findSecret(ctx context.Context, s *scope, sec *corev1.Secret) (ownership, error) {
	if bound(s.ob) || blockedBySecret(s.base) {
		return r.lookup(ctx, s, sec)
	}
	return r.lookupCached(ctx, s, sec)
}

// blockedBySecret reports a claim a user's Secret may have blocked: its
// condition says so, or, on a schema that prunes conditions (NooBaa's), it
// is Failed for a reason the phase does not tell.
func blockedBySecret(c *obv1.ObjectBucketClaim) bool {
	cond := meta.FindStatusCondition(c.Status.Conditions, ConditionProvisioned)
	if cond == nil {
		return c.Status.Phase == obv1.PhaseFailed
	}
	return cond.Reason == ReasonSecretConflict
}

// secretNameTaken handles a Create that found the Secret's name taken by
// one the cache does not hold, with the key in data just made and in no
// record. A user's Secret blocks the claim: the key is revoked with its
// user (made again once the name is free). A Secret of ours the cache has
// not seen gets the key, the user's only live one now.
func (r *Reconciler) secretNameTaken(ctx context.Context, s *scope, data map[string][]byte) (reconcile.Result, error) {
	sec := &corev1.Secret{}
	own, err := r.lookup(ctx, s, sec)
	if err != nil {
		return reconcile.Result{}, err
	}
	switch own {
	case foreign:
		bctx, cancel := backendCtx(ctx)
		err := r.driver.RevokeCredential(bctx, s.plan.user, s.plan.owner)
		cancel()
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("revoke the key made for Secret %s, which is not the claim's: %w", s.claim.Name, err)
		}
		return r.secretTaken(s)
	case absent, terminating:
		// Gone or going since the Create: the next pass starts over, and
		// its EnsureCredential deletes the key made here.
		return reconcile.Result{RequeueAfter: goneRetry}, nil
	}
	sec.Data = data
	r.stamp(s, sec)
	if err := r.put(ctx, s, sec, false); err != nil {
		return reconcile.Result{}, fmt.Errorf("write secret: %w", err)
	}
	return reconcile.Result{}, r.hit(s, crashpoint.ClaimSecretWritten)
}

// secretTaken ends the pass with the claim Failed on a user's Secret.
func (r *Reconciler) secretTaken(s *scope) (reconcile.Result, error) {
	s.fail(ReasonSecretConflict, fmt.Sprintf("Secret %s exists and is not owned by this claim; it was left untouched", s.claim.Name))
	r.event(s, nil, corev1.EventTypeWarning, ReasonSecretConflict, "Provision", "Secret %s exists and is not owned by this claim", s.claim.Name)
	return reconcile.Result{RequeueAfter: foreignRetry}, nil
}

// configMapData is what applications read to reach the bucket.
func (r *Reconciler) configMapData(s *scope) map[string]string {
	port := ""
	if r.opts.BucketPort != 0 {
		port = strconv.Itoa(int(r.opts.BucketPort))
	}
	return map[string]string{
		KeyBucketHost: r.opts.BucketHost, KeyBucketName: s.plan.bucket, KeyBucketPort: port,
		KeyBucketRegion: r.opts.Region, KeyBucketSubRegion: r.opts.SubRegion,
	}
}

// ensureConfigMap writes the ConfigMap. Unlike the Secret it holds nothing
// that must not be made in vain, so a ConfigMap the cache does not have is
// created at once; only a name already taken (someone else's ConfigMap, or
// ours that the cache has not seen yet) costs a read from the API server.
func (r *Reconciler) ensureConfigMap(ctx context.Context, s *scope) (reconcile.Result, error) {
	want := r.configMapData(s)
	cm := &corev1.ConfigMap{}
	err := r.client.Get(ctx, client.ObjectKeyFromObject(s.claim), cm)
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{Data: want}
		r.stamp(s, cm)
		err = r.put(ctx, s, cm, true)
		if err == nil {
			return reconcile.Result{}, r.hit(s, crashpoint.ClaimConfigMapWritten)
		}
		if !apierrors.IsAlreadyExists(err) {
			return reconcile.Result{}, fmt.Errorf("create config map: %w", err)
		}
	}
	cm = &corev1.ConfigMap{}
	own, err := r.lookup(ctx, s, cm)
	if err != nil {
		return reconcile.Result{}, err
	}
	if own == foreign && leftByDeletedClaim(cm, s.claim) {
		uid := cm.UID
		if err := r.client.Delete(ctx, cm, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("delete the config map of a deleted claim: %w", err)
		}
		own = absent
	}
	switch own {
	case foreign:
		s.fail(ReasonSecretConflict, fmt.Sprintf("ConfigMap %s exists and is not owned by this claim; it was left untouched", s.claim.Name))
		r.event(s, nil, corev1.EventTypeWarning, ReasonSecretConflict, "Provision", "ConfigMap %s exists and is not owned by this claim", s.claim.Name)
		return reconcile.Result{RequeueAfter: foreignRetry}, nil
	case terminating:
		gone, err := r.release(ctx, cm)
		if err != nil || !gone {
			return reconcile.Result{RequeueAfter: goneRetry}, err
		}
		own = absent
	case ours:
		if r.stamped(cm) && mapsEqual(cm.Data, want) {
			return reconcile.Result{}, nil
		}
	}
	if own == absent {
		cm = &corev1.ConfigMap{Data: want}
		r.stamp(s, cm)
		err = r.put(ctx, s, cm, true)
	} else {
		cm.Data = want
		r.stamp(s, cm)
		err = r.put(ctx, s, cm, false)
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("write config map: %w", err)
	}
	return reconcile.Result{}, r.hit(s, crashpoint.ClaimConfigMapWritten)
}

// leftByDeletedClaim reports whether obj, named like claim, is controlled
// by an ObjectBucketClaim of the same name and namespace with another UID:
// that claim is gone (names are unique in a namespace), and obj waits for
// the garbage collector, as a ConfigMap does after its claim's deletion. A
// claim made again under the name deletes it rather than wait.
func leftByDeletedClaim(obj client.Object, claim *obv1.ObjectBucketClaim) bool {
	ref := metav1.GetControllerOf(obj)
	return ref != nil && ref.Kind == obv1.ObjectBucketClaimKind && ref.APIVersion == obv1.GroupVersion.String() &&
		ref.Name == claim.Name && ref.UID != claim.UID
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// bind marks the ObjectBucket and the claim Bound.
func (r *Reconciler) bind(ctx context.Context, s *scope) (reconcile.Result, error) {
	if !bound(s.ob) {
		base := s.ob.DeepCopy()
		// Bound is in the phase enum of every CRD variant (NooBaa's has no
		// Pending for ObjectBuckets, which are never written unbound).
		s.ob.Status.Phase = obv1.PhaseBound
		keepGen := r.schema.keeps(crdBuckets, "status.observedGeneration")
		if keepGen {
			s.ob.Status.ObservedGeneration = s.ob.Generation
		}
		if err := r.client.Status().Patch(ctx, s.ob, client.MergeFrom(base), ignoreUnknown); err != nil {
			return reconcile.Result{}, fmt.Errorf("patch object bucket status: %w", err)
		}
		r.written.changed(s.claim.UID, s.ob, base.ResourceVersion)
		if keepGen && s.ob.Generation != 0 && s.ob.Status.ObservedGeneration == 0 {
			r.pruned(ctx, s, "PatchObjectBucketStatus", crdBuckets, prunedField{"status.observedGeneration", "it is no longer written"})
		}
		if err := r.hit(s, crashpoint.ClaimObjectBucketBound); err != nil {
			return reconcile.Result{}, err
		}
	}
	s.phase, s.reason, s.message = obv1.PhaseBound, ReasonBound, fmt.Sprintf("bucket %s is bound", s.plan.bucket)
	if s.base.Status.Phase != obv1.PhaseBound {
		logf.FromContext(ctx).Info("Claim bound", "bucket", s.plan.bucket, "object_bucket", s.ob.Name)
		r.event(s, s.ob, corev1.EventTypeNormal, ReasonBound, "Provision", "Bucket %s is bound", s.plan.bucket)
	}
	return reconcile.Result{}, nil
}
