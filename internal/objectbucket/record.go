package objectbucket

import (
	"context"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	obv1 "github.com/bucketbroker/bucketbroker/api/objectbucket/v1alpha1"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// The ObjectBucket is the claim's durable record, and the CRDs users
// already have disagree on what of it they keep: NooBaa's prunes everything
// under spec.claimRef and every status field but phase, Rook's keeps
// everything (docs/kubernetes.md). What the controller reads back to stay
// exactly-once therefore lives in metadata, which no schema prunes: the
// claim's UID in a label, its namespace/name and the record (names, owner
// mark, reclaim policy, attempt flags) in annotations. The spec fields carry
// the same values for tools that read them.

// CRD names, as the read-back reports them.
const (
	crdClaims  = "objectbucketclaims.objectbucket.io"
	crdBuckets = "objectbuckets.objectbucket.io"
)

// ignoreUnknown writes without the API server's warning for each field the
// installed schema prunes: the controller compares what it wrote with what
// came back, and says so once (schemaFacts) instead of once per write.
var ignoreUnknown = client.FieldValidation(metav1.FieldValidationIgnore)

// recordOf is the record of plan p, as annotations and additionalState.
func recordOf(p plan) map[string]string {
	r := map[string]string{
		stateUser: p.user, stateOwner: p.owner,
		stateBucketOwned: strconv.FormatBool(p.owned), stateAdoptUnmarked: strconv.FormatBool(p.adoptUnmarked),
		stateBucketAttempted: strconv.FormatBool(p.bucketAttempted), stateUserAttempted: strconv.FormatBool(p.userAttempted),
	}
	setQuota(r, p.quota)
	return r
}

// setQuota records q in the record m: a key per limit set, none for a
// limit not set.
func setQuota(m map[string]string, q driver.Quota) {
	delete(m, stateMaxSize)
	delete(m, stateMaxObjects)
	if q.MaxSize != 0 {
		m[stateMaxSize] = strconv.FormatInt(q.MaxSize, 10)
	}
	if q.MaxObjects != 0 {
		m[stateMaxObjects] = strconv.FormatInt(q.MaxObjects, 10)
	}
}

// quotaOf reads the quota recorded in the record m; a value that is not a
// number (changed by hand) reads as no limit, which the next pass then
// applies anew.
func quotaOf(m map[string]string) driver.Quota {
	size, _ := strconv.ParseInt(m[stateMaxSize], 10, 64)
	objects, _ := strconv.ParseInt(m[stateMaxObjects], 10, 64)
	return driver.Quota{MaxSize: size, MaxObjects: objects}
}

// recordAnnotations is what the ObjectBucket of claim c with plan p carries
// in its annotations.
func recordAnnotations(c *obv1.ObjectBucketClaim, p plan) map[string]string {
	a := recordOf(p)
	a[AnnotationClaim] = c.Namespace + "/" + c.Name
	a[AnnotationBucketName] = p.bucket
	a[annotationReclaimPolicy] = string(p.reclaim)
	return a
}

// planOf reads the record of ob from its annotations.
func planOf(ob *obv1.ObjectBucket) plan {
	a := ob.Annotations
	return plan{
		bucket: a[AnnotationBucketName], user: a[stateUser], owner: a[stateOwner],
		reclaim:         obv1.ReclaimPolicy(a[annotationReclaimPolicy]),
		owned:           a[stateBucketOwned] == "true",
		adoptUnmarked:   a[stateAdoptUnmarked] == "true",
		bucketAttempted: a[stateBucketAttempted] == "true",
		userAttempted:   a[stateUserAttempted] == "true",
		quota:           quotaOf(a),
	}
}

// boundUID returns the UID of the claim ob is bound to, or "" when it is
// bound to none that can be trusted: the label decides, and a claimRef
// that names another UID contradicts it and binds ob to nothing.
func boundUID(ob *obv1.ObjectBucket) types.UID {
	uid := types.UID(ob.Labels[LabelClaimUID])
	if ref := ob.Spec.ClaimRef; ref != nil && ref.UID != "" && ref.UID != uid {
		return ""
	}
	return uid
}

// claimKeyOf returns the "<namespace>/<name>" of the claim ob is bound to,
// or "".
func claimKeyOf(ob *obv1.ObjectBucket) string {
	return ob.Annotations[AnnotationClaim]
}

// claimNameOf splits claimKeyOf(ob).
func claimNameOf(ob *obv1.ObjectBucket) (types.NamespacedName, bool) {
	ns, name, ok := strings.Cut(claimKeyOf(ob), "/")
	if !ok || ns == "" || name == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: name}, true
}

// schemaFacts holds the fields this process found pruned by the installed
// CRDs, each said once (an Event and a log line). A field found pruned is
// no longer written: status conditions and observedGeneration are skipped
// on a schema that has only phase. A CRD changed to keep them is seen on
// the controller's next start.
type schemaFacts struct {
	mu      sync.Mutex
	dropped map[string]bool
}

func (f *schemaFacts) keeps(crd, field string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.dropped[crd+" "+field]
}

// drop records that crd prunes field, and reports whether this is news.
func (f *schemaFacts) drop(crd, field string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := crd + " " + field
	if f.dropped[k] {
		return false
	}
	if f.dropped == nil {
		f.dropped = map[string]bool{}
	}
	f.dropped[k] = true
	return true
}

// prunedField is a field a write found dropped, and what that means.
type prunedField struct {
	field, consequence string
}

// pruned says, once per process and field, which fields the installed CRD
// crd dropped from a write (action: the write, as an Event's action): a log
// line per field and one Event for the write. The Event's action tells the
// writes apart (Events of one claim with the same reason and action are
// merged into one series, whose note is the first's).
func (r *Reconciler) pruned(ctx context.Context, s *scope, action, crd string, found ...prunedField) {
	var fields, consequences []string
	for _, f := range found {
		if !r.schema.drop(crd, f.field) {
			continue
		}
		logf.FromContext(ctx).Info("Installed CRD prunes a field this controller writes", "crd", crd, "field", f.field, "consequence", f.consequence)
		fields = append(fields, f.field)
		consequences = append(consequences, f.consequence)
	}
	if len(fields) == 0 {
		return
	}
	r.event(s, nil, corev1.EventTypeWarning, "SchemaPrunesField", action,
		"CRD %s prunes %s: %s", crd, strings.Join(fields, " and "), strings.Join(consequences, "; "))
}

// checkObjectBucket compares the ObjectBucket as created (got, the API
// server's answer) with what was sent, and says which fields the schema
// dropped. Nothing the controller reads depends on them (the record is in
// metadata); tools that read them see less.
func (r *Reconciler) checkObjectBucket(ctx context.Context, s *scope, sent, got *obv1.ObjectBucket) {
	var found []prunedField
	ref, want := got.Spec.ClaimRef, sent.Spec.ClaimRef
	if ref == nil || ref.UID != want.UID || ref.Name != want.Name || ref.Namespace != want.Namespace {
		found = append(found, prunedField{"spec.claimRef",
			"the claim is tied to its ObjectBucket by the label " + LabelClaimUID + " and the annotation " + AnnotationClaim +
				" instead; tools that read spec.claimRef do not see the claim"})
	}
	for k, v := range sent.Spec.AdditionalState {
		if got.Spec.AdditionalState[k] != v {
			found = append(found, prunedField{"spec.additionalState",
				"the record is read from the ObjectBucket's annotations; tools that read spec.additionalState do not see it"})
			break
		}
	}
	if got.Spec.Endpoint == nil || got.Spec.Endpoint.BucketName != sent.Spec.Endpoint.BucketName {
		found = append(found, prunedField{"spec.endpoint.bucketName",
			"the bucket name is read from the annotation " + AnnotationBucketName + "; tools that read spec.endpoint do not see it"})
	}
	if got.Spec.ReclaimPolicy != sent.Spec.ReclaimPolicy {
		found = append(found, prunedField{"spec.reclaimPolicy",
			"the reclaim policy is read from the annotation " + annotationReclaimPolicy})
	}
	r.pruned(ctx, s, "CreateObjectBucket", crdBuckets, found...)
}
