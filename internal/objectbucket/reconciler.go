package objectbucket

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	obv1 "github.com/bucketbroker/bucketbroker/api/objectbucket/v1alpha1"
	"github.com/bucketbroker/bucketbroker/internal/crashpoint"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// DefaultProvisionerName is the StorageClass provisioner bucketbroker answers
// to unless told otherwise.
const DefaultProvisionerName = "bucketbroker.io/bucket"

// Condition types on the claim besides the API's Ready.
const (
	ConditionProvisioned = "Provisioned"
)

// Condition reasons.
const (
	ReasonBound           = "Bound"
	ReasonProvisioning    = "Provisioning"
	ReasonBackendError    = "BackendError"
	ReasonBucketConflict  = "BucketConflict"
	ReasonUserConflict    = "UserConflict"
	ReasonSecretConflict  = "SecretConflict"
	ReasonObjectConflict  = "ObjectBucketConflict"
	ReasonBucketMissing   = "BucketMissing"
	ReasonInvalid         = "Invalid"
	ReasonDeleting        = "Deleting"
	ReasonDeletionBlocked = "DeletionBlocked"
	ReasonQuotaApplied    = "QuotaApplied"
)

const (
	// conflictRetry is how soon a pass that lost a write race, or found its
	// cache behind its own writes, runs again.
	conflictRetry = 500 * time.Millisecond
	// goneRetry is how soon deletion looks again for an object not gone yet.
	goneRetry = 250 * time.Millisecond
	// foreignRetry is how often a claim blocked by a user's object looks
	// again (that object is not watched: it lacks our label).
	foreignRetry = time.Minute
	// backendTimeout bounds each driver call.
	backendTimeout = 2 * time.Minute
	// indexStorageClass indexes claims by spec.storageClassName.
	indexStorageClass = "spec.storageClassName"
	// indexClaim indexes ObjectBuckets by the namespace/name of their
	// claim (claimKeyOf: the annotation, not spec.claimRef, which a schema
	// may prune).
	indexClaim = AnnotationClaim
)

// Throughput defaults, measured by BenchmarkClaimLifecycle
// (docs/performance.md): a few hundred claims created at once bind within
// seconds instead of queueing behind client-side limits made for a single
// slow watcher. The API server's priority and fairness still protects it.
const (
	// DefaultQPS and DefaultBurst are the client-side limits of the
	// client NewClient makes (controller-runtime keeps one limiter per
	// resource).
	DefaultQPS   = 200
	DefaultBurst = 400
	// DefaultMaxConcurrentReconciles is the number of claims handled at
	// once. Passes mostly wait on the API server and the backend: with the
	// embedded server on two shared cores, 20 workers bound and deleted 500
	// claims 3-20% sooner than 10 in each of four paired runs, 32 were
	// slower than either (BenchmarkClaimLifecycle -workers).
	DefaultMaxConcurrentReconciles = 20
)

// NewClient is a client.NewClientFunc (ctrl.Options.NewClient) that raises
// the config's client-side limits to DefaultQPS and DefaultBurst.
func NewClient(cfg *rest.Config, o client.Options) (client.Client, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS >= 0 && cfg.QPS < DefaultQPS {
		cfg.QPS = DefaultQPS
	}
	if cfg.Burst < DefaultBurst {
		cfg.Burst = DefaultBurst
	}
	return client.New(cfg, o)
}

// Options configure a Reconciler.
type Options struct {
	// ProvisionerName is the StorageClass provisioner whose claims this
	// controller serves; empty means DefaultProvisionerName.
	ProvisionerName string
	// Prefix starts backend bucket and user names (see driver.BucketName).
	Prefix string
	// BucketHost, BucketPort, Region and SubRegion are written into each
	// claim's ConfigMap: where applications reach the S3 endpoint.
	BucketHost string
	BucketPort int32
	Region     string
	SubRegion  string
	// MaxConcurrentReconciles bounds parallel claims; 0 means
	// DefaultMaxConcurrentReconciles.
	MaxConcurrentReconciles int
	// SkipNameValidation allows several managers in one process (tests).
	SkipNameValidation bool
}

// Reconciler turns ObjectBucketClaims into buckets, credentials,
// ObjectBuckets, Secrets and ConfigMaps.
type Reconciler struct {
	client   client.Client
	reader   client.Reader // the API server itself, for answers a cache may not have yet
	driver   driver.Driver
	recorder events.EventRecorder
	opts     Options
	label    string

	// finalized holds the claims whose finalizer this process removed, so
	// that the passes their last writes trigger, which read a cache that
	// has not yet seen the claim go, send nothing.
	finalized finalizedSet
	// written holds what this process wrote while provisioning each claim,
	// so that a pass on a cache behind it waits for the cache instead.
	written writeSet
	// schema holds the fields the installed CRDs were found to prune.
	schema schemaFacts

	// afterWrite, when set (tests only), is called after each named write;
	// an error stops the pass at once, as a crash there would.
	afterWrite func(point string) error
}

// NewReconciler returns a Reconciler for mgr's cluster using drv.
func NewReconciler(mgr ctrl.Manager, drv driver.Driver, opts Options) (*Reconciler, error) {
	if drv == nil {
		return nil, errors.New("objectbucket: a driver is required")
	}
	if opts.ProvisionerName == "" {
		opts.ProvisionerName = DefaultProvisionerName
	}
	if err := driver.ValidatePrefix(opts.Prefix); err != nil {
		return nil, err
	}
	if opts.MaxConcurrentReconciles <= 0 {
		opts.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	return &Reconciler{
		client:   mgr.GetClient(),
		reader:   mgr.GetAPIReader(),
		driver:   drv,
		recorder: mgr.GetEventRecorder("bucketbroker-" + LabelValue(opts.ProvisionerName)),
		opts:     opts,
		label:    LabelValue(opts.ProvisionerName),
	}, nil
}

// CacheOptions restricts the manager's cache of Secrets and ConfigMaps to
// those labeled for the provisioner: the controller never holds the
// cluster's other Secrets in memory.
func CacheOptions(provisionerName string) cache.Options {
	if provisionerName == "" {
		provisionerName = DefaultProvisionerName
	}
	sel := labels.SelectorFromSet(labels.Set{LabelProvisioner: LabelValue(provisionerName)})
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Secret{}:    {Label: sel},
		&corev1.ConfigMap{}: {Label: sel},
	}}
}

// SetupWithManager registers the controller: claims, the Secrets and
// ConfigMaps they own (drift), their ObjectBuckets, and StorageClasses (a
// claim may come before its class).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	err := mgr.GetFieldIndexer().IndexField(context.Background(), &obv1.ObjectBucketClaim{}, indexStorageClass,
		func(o client.Object) []string { return []string{o.(*obv1.ObjectBucketClaim).Spec.StorageClassName} })
	if err != nil {
		return fmt.Errorf("index claims by storage class: %w", err)
	}
	err = mgr.GetFieldIndexer().IndexField(context.Background(), &obv1.ObjectBucket{}, indexClaim,
		func(o client.Object) []string {
			if k := claimKeyOf(o.(*obv1.ObjectBucket)); k != "" {
				return []string{k}
			}
			return nil
		})
	if err != nil {
		return fmt.Errorf("index object buckets by claim: %w", err)
	}
	skip := r.opts.SkipNameValidation
	return ctrl.NewControllerManagedBy(mgr).
		Named("objectbucketclaim").
		For(&obv1.ObjectBucketClaim{}).
		Owns(&corev1.Secret{}).
		Owns(&corev1.ConfigMap{}).
		Watches(&obv1.ObjectBucket{}, handler.EnqueueRequestsFromMapFunc(claimOfBucket)).
		Watches(&storagev1.StorageClass{}, handler.EnqueueRequestsFromMapFunc(r.claimsOfClass),
			builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
				return o.(*storagev1.StorageClass).Provisioner == r.opts.ProvisionerName
			}))).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.opts.MaxConcurrentReconciles, SkipNameValidation: &skip}).
		Complete(r)
}

func claimOfBucket(_ context.Context, o client.Object) []reconcile.Request {
	key, ok := claimNameOf(o.(*obv1.ObjectBucket))
	if !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: key}}
}

func (r *Reconciler) claimsOfClass(ctx context.Context, o client.Object) []reconcile.Request {
	var list obv1.ObjectBucketClaimList
	if err := r.client.List(ctx, &list, client.MatchingFields{indexStorageClass: o.GetName()}); err != nil {
		logf.FromContext(ctx).Error(err, "List claims of a storage class", "storage_class", o.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, c := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
	}
	return reqs
}

// scope is what one pass over one claim knows.
type scope struct {
	claim *obv1.ObjectBucketClaim
	base  *obv1.ObjectBucketClaim // as read, for the status patch
	class *storagev1.StorageClass // nil when gone (deletion only)

	ob *obv1.ObjectBucket
	// plan is the bucket and backend names, from the ObjectBucket when it
	// exists, else derived.
	plan plan
	// quota is what the claim's additionalConfig asks for (checkQuota).
	quota driver.Quota

	// phase and the Provisioned condition the pass ends with.
	phase   obv1.Phase
	reason  string
	message string
	// stopped: the pass was cut at a crash point (tests) or the claim is
	// gone; nothing more is written.
	stopped bool
}

// plan names everything a claim gets on the backend.
type plan struct {
	bucket string
	owned  bool // the bucket is the claim's: created (or adopted) by it, deleted per policy
	// adoptUnmarked: the bucket was generated for this claim by an
	// earlier provisioner (writtenByOldProvisioner), so it is the claim's
	// though it carries no mark of ours.
	adoptUnmarked bool
	// bucketAttempted and userAttempted: the record holds a look that
	// found the name free (or the claim's) before the first attempt to
	// create it (stateBucketAttempted, stateUserAttempted).
	bucketAttempted bool
	userAttempted   bool
	user            string
	owner           string
	reclaim         obv1.ReclaimPolicy
	// quota is the bucket's limits as last applied (stateMaxSize,
	// stateMaxObjects).
	quota driver.Quota
}

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, err error) {
	claim := &obv1.ObjectBucketClaim{}
	if err := r.client.Get(ctx, req.NamespacedName, claim); err != nil {
		if apierrors.IsNotFound(err) {
			return r.reconcileOrphans(ctx, req.NamespacedName)
		}
		return reconcile.Result{}, err
	}
	class, ours, err := r.responsible(ctx, claim)
	if err != nil || !ours {
		return reconcile.Result{}, err
	}
	if claim.DeletionTimestamp.IsZero() {
		behind, wait, err := r.written.behind(ctx, r.client, claim)
		if err != nil {
			return reconcile.Result{}, err
		}
		if behind {
			logf.FromContext(ctx).V(1).Info("Cache behind this controller's own writes, waiting for it")
			return reconcile.Result{RequeueAfter: wait}, nil
		}
	}
	s := &scope{claim: claim, base: claim.DeepCopy(), class: class}
	defer func() {
		if s.stopped {
			return
		}
		if perr := r.patchStatus(ctx, s, err); perr != nil && err == nil {
			res, err = r.quiet(ctx, perr)
		}
	}()

	if !claim.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	return r.reconcileNormal(ctx, s)
}

// responsible reports whether the claim is this provisioner's: it took it
// earlier (annotation), or its StorageClass names it.
func (r *Reconciler) responsible(ctx context.Context, claim *obv1.ObjectBucketClaim) (*storagev1.StorageClass, bool, error) {
	took := claim.Annotations[AnnotationProvisioner] == r.opts.ProvisionerName
	class := &storagev1.StorageClass{}
	err := r.client.Get(ctx, types.NamespacedName{Name: claim.Spec.StorageClassName}, class)
	switch {
	case apierrors.IsNotFound(err):
		return nil, took, nil // a claim we took is still ours to delete
	case err != nil:
		return nil, false, fmt.Errorf("get storage class %q: %w", claim.Spec.StorageClassName, err)
	}
	return class, took || class.Provisioner == r.opts.ProvisionerName, nil
}

// quiet turns a lost write race into a short requeue: not an error, and not
// logged as one.
func (r *Reconciler) quiet(ctx context.Context, err error) (reconcile.Result, error) {
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		logf.FromContext(ctx).V(1).Info("Write raced, retrying", "reason", err.Error())
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	}
	return reconcile.Result{}, err
}

// hit marks a named write done, for the crash tests: the process-level
// ones (crashpoint p) and the in-process ones (afterWrite, told p.What()).
func (r *Reconciler) hit(s *scope, p crashpoint.Point) error {
	crashpoint.Hit(p)
	if r.afterWrite == nil {
		return nil
	}
	if err := r.afterWrite(p.What()); err != nil {
		s.stopped = true
		return err
	}
	return nil
}

// patchStatus writes phase and conditions once per pass, only if they
// changed. Conditions and observedGeneration are left out once the
// installed schema was found to prune them (NooBaa's keeps phase alone):
// writing them again would change nothing and cost a request each pass.
func (r *Reconciler) patchStatus(ctx context.Context, s *scope, passErr error) error {
	c := s.claim
	gen := c.Generation
	if s.phase == "" {
		s.phase = obv1.PhasePending
		if s.base.Status.Phase != "" && s.base.Status.Phase != obv1.PhaseBound {
			s.phase = s.base.Status.Phase
		}
	}
	if s.reason == "" {
		s.reason, s.message = ReasonProvisioning, "provisioning the bucket and its credentials"
		if passErr != nil {
			s.reason, s.message = ReasonBackendError, passErr.Error()
		}
	}
	c.Status.Phase = s.phase
	keepGen := r.schema.keeps(crdClaims, "status.observedGeneration")
	keepConds := r.schema.keeps(crdClaims, "status.conditions")
	if keepGen {
		c.Status.ObservedGeneration = gen
	}
	if keepConds {
		provisioned, ready := metav1.ConditionFalse, metav1.ConditionFalse
		if s.phase == obv1.PhaseBound {
			provisioned, ready = metav1.ConditionTrue, metav1.ConditionTrue
		}
		meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
			Type: ConditionProvisioned, Status: provisioned, Reason: s.reason, Message: s.message, ObservedGeneration: gen,
		})
		meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
			Type: obv1.ConditionReady, Status: ready, Reason: s.reason, Message: s.message, ObservedGeneration: gen,
		})
	}
	if equality.Semantic.DeepEqual(s.base.Status, c.Status) {
		return nil
	}
	before := c.ResourceVersion
	if err := r.client.Status().Patch(ctx, c, client.MergeFrom(s.base), ignoreUnknown); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("patch claim status: %w", err)
	}
	if c.DeletionTimestamp.IsZero() {
		r.written.changed(c.UID, c, before)
	}
	// c holds the API server's answer: what the schema kept.
	var found []prunedField
	if keepConds && len(c.Status.Conditions) == 0 {
		found = append(found, prunedField{"status.conditions",
			"they are no longer written; status.phase and the claim's Events say what happened"})
	}
	if keepGen && gen != 0 && c.Status.ObservedGeneration == 0 {
		found = append(found, prunedField{"status.observedGeneration", "it is no longer written"})
	}
	r.pruned(ctx, s, "PatchClaimStatus", crdClaims, found...)
	return nil
}

// event records an event on the claim.
func (r *Reconciler) event(s *scope, obj runtime.Object, typ, reason, action, note string, args ...any) {
	r.recorder.Eventf(s.claim, obj, typ, reason, action, note, args...)
}

// fail ends the pass with the claim Failed: a retry cannot fix it until
// something else changes.
func (s *scope) fail(reason, msg string) {
	s.phase, s.reason, s.message = obv1.PhaseFailed, reason, msg
}

func backendCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, backendTimeout)
}
