package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the group and version of every kind in this package.
var GroupVersion = schema.GroupVersion{Group: "objectbucket.io", Version: "v1alpha1"}

var (
	// SchemeBuilder registers this package's kinds; apimachinery's builder,
	// not controller-runtime's, keeps the package free of controller-runtime.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds ObjectBucketClaim, ObjectBucket and their lists to a
	// scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Kind names, for owner references and GroupVersionKinds.
const (
	ObjectBucketClaimKind = "ObjectBucketClaim"
	ObjectBucketKind      = "ObjectBucket"
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion,
		&ObjectBucketClaim{}, &ObjectBucketClaimList{},
		&ObjectBucket{}, &ObjectBucketList{},
	)
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
