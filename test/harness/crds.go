package harness

import (
	"fmt"
	"os"
	"path/filepath"
)

// The objectbucket.io CRDs a test API server installs. Users already have
// these CRDs from Rook or NooBaa, and bucketbroker must work on each as
// installed, so the claim tests run on each (docs/kubernetes.md):
//
//	bucketbroker  config/crd/bases, generated from api/ (the default)
//	noobaa        config/crd/test/noobaa: prunes spec.claimRef and every
//	              status field but phase, string-only maps
//	rook          config/crd/test/rook: keeps unknown fields under claimRef,
//	              additionalConfig, additionalState and status
const (
	CRDsBucketbroker = "bucketbroker"
	CRDsNooBaa       = "noobaa"
	CRDsRook         = "rook"
)

// CRDsEnv selects the CRD set of a test run.
const CRDsEnv = "BUCKETBROKER_TEST_CRDS"

// CRDVariant returns the CRD set BUCKETBROKER_TEST_CRDS names (default
// bucketbroker) and the directory of its CRDs under the repository at root.
// Any other value is an error: a typo must not test the default set under
// another name.
func CRDVariant(root string) (variant, dir string, err error) {
	variant = os.Getenv(CRDsEnv)
	switch variant {
	case "", CRDsBucketbroker:
		return CRDsBucketbroker, filepath.Join(root, "config", "crd", "bases"), nil
	case CRDsNooBaa, CRDsRook:
		return variant, filepath.Join(root, "config", "crd", "test", variant), nil
	}
	return "", "", fmt.Errorf("%s=%q: want %s, %s or %s", CRDsEnv, variant, CRDsBucketbroker, CRDsNooBaa, CRDsRook)
}

// PrunesStatus reports whether the CRD set keeps only status.phase on
// claims and ObjectBuckets (conditions and observedGeneration pruned).
func PrunesStatus(variant string) bool { return variant == CRDsNooBaa }

// PrunesClaimRef reports whether the CRD set prunes everything under an
// ObjectBucket's spec.claimRef.
func PrunesClaimRef(variant string) bool { return variant == CRDsNooBaa }
