package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// ReclaimPolicy says what happens to the bucket when its claim is deleted.
// lib-bucket-provisioner copied it from the StorageClass's reclaimPolicy.
//
// +kubebuilder:validation:Enum=Delete;Retain
type ReclaimPolicy string

const (
	// ReclaimDelete deletes the bucket with its claim. A brownfield bucket
	// (one that existed before the claim) is never deleted; only the access
	// granted for the claim is revoked.
	ReclaimDelete ReclaimPolicy = "Delete"
	// ReclaimRetain keeps the bucket and its objects; access is revoked.
	ReclaimRetain ReclaimPolicy = "Retain"
)

// ClaimReference points from an ObjectBucket to the claim it is bound to.
// Its JSON shape is that of core/v1 ObjectReference, which
// lib-bucket-provisioner used, so existing objects read unchanged; it is its
// own type to keep this package free of k8s.io/api.
type ClaimReference struct {
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// +optional
	Kind string `json:"kind,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	Name string `json:"name,omitempty"`
	// UID of the claim: a claim deleted and recreated under the same name is
	// a different claim, and must not adopt this bucket.
	// +optional
	UID types.UID `json:"uid,omitempty"`
	// +optional
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// +optional
	FieldPath string `json:"fieldPath,omitempty"`
}

// Endpoint is everything an application needs to reach the bucket, except
// credentials. The ConfigMap for the claim is derived from it.
type Endpoint struct {
	// BucketHost is the S3 endpoint's host name (BUCKET_HOST).
	// +optional
	BucketHost string `json:"bucketHost,omitempty"`
	// BucketPort is the S3 endpoint's port (BUCKET_PORT).
	// +optional
	BucketPort int32 `json:"bucketPort,omitempty"`
	// BucketName is the bucket's name in the object store (BUCKET_NAME).
	// +optional
	BucketName string `json:"bucketName,omitempty"`
	// Region is the bucket's region (BUCKET_REGION).
	// +optional
	Region string `json:"region,omitempty"`
	// SubRegion is the bucket's sub-region (BUCKET_SUBREGION).
	// +optional
	SubRegion string `json:"subRegion,omitempty"`
	// AdditionalConfig holds driver-specific connection settings.
	// +optional
	AdditionalConfig map[string]string `json:"additionalConfig,omitempty"`
}

// ObjectBucketSpec describes a provisioned bucket.
//
// lib-bucket-provisioner's spec also embedded an Authentication struct, but
// every field of it was tagged json:"-": credentials never reached the API
// server, only the claim's Secret. It has no counterpart here.
type ObjectBucketSpec struct {
	// StorageClassName is the StorageClass the claim was provisioned through.
	// +kubebuilder:validation:MinLength=1
	StorageClassName string `json:"storageClassName"`

	// ReclaimPolicy says what happens to the bucket when the claim goes.
	// +optional
	ReclaimPolicy ReclaimPolicy `json:"reclaimPolicy,omitempty"`

	// ClaimRef is the claim this bucket is bound to.
	// +optional
	ClaimRef *ClaimReference `json:"claimRef,omitempty"`

	// Endpoint says where the bucket is.
	// +optional
	Endpoint *Endpoint `json:"endpoint,omitempty"`

	// AdditionalState is the driver's private state for this bucket.
	// +optional
	AdditionalState map[string]string `json:"additionalState,omitempty"`
}

// ObjectBucketStatus is what the provisioner observed.
type ObjectBucketStatus struct {
	// Phase is the coarse state read by lib-bucket-provisioner clients.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// ObservedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions describe the bucket in detail.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// ObjectBucket is a bucket provisioned for one ObjectBucketClaim.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ob;obs,categories=objectstorage
// +kubebuilder:printcolumn:name="StorageClass",type="string",JSONPath=".spec.storageClassName",description="StorageClass"
// +kubebuilder:printcolumn:name="ClaimNamespace",type="string",JSONPath=".spec.claimRef.namespace",description="ClaimNamespace"
// +kubebuilder:printcolumn:name="ClaimName",type="string",JSONPath=".spec.claimRef.name",description="ClaimName"
// +kubebuilder:printcolumn:name="ReclaimPolicy",type="string",JSONPath=".spec.reclaimPolicy",description="ReclaimPolicy"
// +kubebuilder:printcolumn:name="Phase",type="string",JSONPath=".status.phase",description="Phase"
// +kubebuilder:printcolumn:name="Bucket",type="string",JSONPath=".spec.endpoint.bucketName",priority=1
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type ObjectBucket struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ObjectBucketSpec `json:"spec"`
	// +optional
	Status ObjectBucketStatus `json:"status,omitempty"`
}

// ObjectBucketList is a list of ObjectBuckets.
//
// +kubebuilder:object:root=true
type ObjectBucketList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ObjectBucket `json:"items"`
}
