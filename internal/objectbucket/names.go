package objectbucket

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Keys the controller writes. The finalizer and the label key are the ones
// lib-bucket-provisioner used, so tools written for Rook and NooBaa keep
// finding the objects.
const (
	// Finalizer is on the claim, its ObjectBucket and its Secret (not its
	// ConfigMap: see keepsFinalizer).
	Finalizer = "objectbucket.io/finalizer"
	// LabelProvisioner marks every object the controller creates; its value
	// is LabelValue(provisioner name). The manager caches only Secrets and
	// ConfigMaps that carry it.
	LabelProvisioner = "bucket-provisioner"

	// AnnotationProvisioner on a claim names the provisioner that took it,
	// so that deletion needs neither the StorageClass nor the shared
	// objectbucket.io finalizer to tell whose claim it is.
	AnnotationProvisioner = "bucketbroker.io/provisioner"
	// AnnotationBucketName on a claim records the bucket name chosen for it,
	// written before the bucket is created.
	AnnotationBucketName = "bucketbroker.io/bucket-name"

	// LabelClaimUID on an ObjectBucket is the UID of the claim it is bound
	// to, and AnnotationClaim its "<namespace>/<name>": the binding as
	// metadata, which no CRD schema prunes. spec.claimRef says the same for
	// tools that read it (NooBaa's CRD prunes everything under it); the
	// controller reads it only to refuse an ObjectBucket whose claimRef
	// names another claim (boundUID).
	LabelClaimUID   = "bucketbroker.io/claim-uid"
	AnnotationClaim = "bucketbroker.io/claim"
	// annotationReclaimPolicy on an ObjectBucket records its reclaim
	// policy; the bucket name is recorded under AnnotationBucketName.
	annotationReclaimPolicy = "bucketbroker.io/reclaim-policy"

	// Keys of the ObjectBucket's record: its annotations, and the same keys
	// in spec.additionalState for tools that read it. They let deletion
	// work without the StorageClass or the claim's spec.
	stateUser          = "bucketbroker.io/user"
	stateOwner         = "bucketbroker.io/owner"
	stateBucketOwned   = "bucketbroker.io/bucket-owned"
	stateAdoptUnmarked = "bucketbroker.io/adopt-unmarked"
	// stateBucketAttempted and stateUserAttempted are "true" once a look
	// (driver Observe) made before the first attempt to create the bucket
	// or the user showed the name free or carrying the claim's mark. Only
	// then is an unmarked bucket or user of that name the claim's own,
	// left by a crash between creating it and marking it, and adopted
	// (AdoptUnmarked). "false" means: look before the next attempt.
	stateBucketAttempted = "bucketbroker.io/bucket-attempted"
	stateUserAttempted   = "bucketbroker.io/user-attempted"
	// stateMaxSize and stateMaxObjects are the limits last applied to the
	// bucket, in bytes and objects; absent for none.
	stateMaxSize    = "bucketbroker.io/max-size"
	stateMaxObjects = "bucketbroker.io/max-objects"

	// ConfigMaxSize and ConfigMaxObjects are the claim's additionalConfig
	// keys for its bucket's quota, as Rook names them: a size as a
	// Kubernetes quantity ("10Gi"), a number of objects.
	ConfigMaxSize    = "maxSize"
	ConfigMaxObjects = "maxObjects"

	// Keys of the Secret and the ConfigMap applications read.
	KeyAccessKeyID     = "AWS_ACCESS_KEY_ID"
	KeySecretAccessKey = "AWS_SECRET_ACCESS_KEY"
	KeyBucketHost      = "BUCKET_HOST"
	KeyBucketName      = "BUCKET_NAME"
	KeyBucketPort      = "BUCKET_PORT"
	KeyBucketRegion    = "BUCKET_REGION"
	KeyBucketSubRegion = "BUCKET_SUBREGION"

	// ParameterBucketName in a StorageClass names an existing bucket
	// (brownfield): claims get access to it and it is never deleted.
	ParameterBucketName = "bucketName"

	// claimKind is the kind passed to the driver's name functions.
	claimKind = "claim"
	// maxBucketName is the S3 limit.
	maxBucketName = 63
	// generatedSuffix is the length of the hash a generated name ends with.
	generatedSuffix = 24
)

// NameForClaim is the name of the ObjectBucket of the claim with the
// given UID: bounded (40 characters), unique as the UID is, and computable
// again after a crash or when the claim's spec.objectBucketName was pruned.
// lib-bucket-provisioner's obc-<namespace>-<name> collides (a-b/c and
// a/b-c) and has no length bound.
func NameForClaim(uid types.UID) string {
	return "obc-" + string(uid)
}

// LabelValue turns a provisioner name (bucketbroker.io/bucket) into a valid
// label value (bucketbroker.io-bucket), as lib-bucket-provisioner did; a name
// too long for a label value keeps its start and a hash of the whole.
func LabelValue(provisioner string) string {
	v := strings.ReplaceAll(provisioner, "/", "-")
	if len(v) <= 63 {
		return v
	}
	sum := sha256.Sum256([]byte(provisioner))
	return strings.Trim(v[:46], "-_.") + "-" + hex.EncodeToString(sum[:])[:16]
}

// generatedBucketName makes a bucket name from a claim's generateBucketName
// and its UID: the prefix (cleaned to [a-z0-9-], shortened so the whole fits
// in 63 characters) and a hash of the UID, so the name is the same on every
// retry and differs between claims.
func generatedBucketName(prefix string, uid types.UID) string {
	var b strings.Builder
	for _, r := range strings.ToLower(prefix) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' {
			b.WriteRune(r)
		}
	}
	p := b.String()
	if n := maxBucketName - 1 - generatedSuffix; len(p) > n {
		p = p[:n]
	}
	p = strings.Trim(p, "-")
	sum := sha256.Sum256([]byte(claimKind + "\x00" + string(uid)))
	h := hex.EncodeToString(sum[:])[:generatedSuffix]
	if p == "" {
		return "obc-" + h
	}
	return p + "-" + h
}
