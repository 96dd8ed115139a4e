package objectbucket

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	obv1 "github.com/bucketbroker/bucketbroker/api/objectbucket/v1alpha1"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// TestBoundUID: an ObjectBucket is bound to the claim its label names, and
// to none when its claimRef names another claim or when it has no label:
// an ObjectBucket another provisioner wrote (lib-bucket-provisioner's
// obc-<namespace>-<name>, bound by claimRef only), or one whose label was
// removed, is never taken for a claim's, whatever its name and record say.
func TestBoundUID(t *testing.T) {
	const uid = "0c9bd7a1-52c4-4f3e-8a52-2f8f1a1e5d3c"
	ref := func(u types.UID) *obv1.ClaimReference {
		return &obv1.ClaimReference{Namespace: "ns", Name: "c", UID: u}
	}
	ob := func(label string, claimRef *obv1.ClaimReference) *obv1.ObjectBucket {
		o := &obv1.ObjectBucket{ObjectMeta: metav1.ObjectMeta{
			Name:        NameForClaim(uid),
			Annotations: map[string]string{stateOwner: driver.OwnerMark(claimKind, uid)},
		}}
		if label != "" {
			o.Labels = map[string]string{LabelClaimUID: label}
		}
		o.Spec.ClaimRef = claimRef
		return o
	}
	cases := []struct {
		name string
		ob   *obv1.ObjectBucket
		want types.UID
	}{
		{"label", ob(uid, nil), uid},
		{"label and the same claimRef", ob(uid, ref(uid)), uid},
		{"label and a claimRef pruned to nothing", ob(uid, &obv1.ClaimReference{}), uid},
		{"label and another claimRef", ob(uid, ref("other")), ""},
		{"claimRef only", ob("", ref(uid)), ""},
		{"name and owner mark only", ob("", nil), ""},
	}
	for _, c := range cases {
		if got := boundUID(c.ob); got != c.want {
			t.Errorf("%s: boundUID = %q, want %q", c.name, got, c.want)
		}
	}
}
