package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ObjectBucketClaimSpec is what the user asks for.
type ObjectBucketClaimSpec struct {
	// StorageClassName names the StorageClass whose provisioner handles this
	// claim and whose parameters configure the bucket. A bucketName parameter
	// there names an existing (brownfield) bucket.
	// +kubebuilder:validation:MinLength=1
	StorageClassName string `json:"storageClassName"`

	// BucketName is the exact bucket name wanted. Bucket names are global to
	// the object store, so they may collide across namespaces; prefer
	// GenerateBucketName. When both are set BucketName wins, except on claims
	// written by lib-bucket-provisioner, which filled BucketName in with the
	// generated name.
	// +optional
	BucketName string `json:"bucketName,omitempty"`

	// GenerateBucketName is a prefix; the provisioner appends a unique suffix.
	// +optional
	GenerateBucketName string `json:"generateBucketName,omitempty"`

	// AdditionalConfig holds driver-specific settings, such as quotas.
	// +optional
	AdditionalConfig map[string]string `json:"additionalConfig,omitempty"`

	// ObjectBucketName is set by the provisioner to the name of the bound
	// ObjectBucket. It is the authoritative record of binding.
	// +optional
	ObjectBucketName string `json:"objectBucketName,omitempty"`
}

// ObjectBucketClaimStatus is what the provisioner observed.
type ObjectBucketClaimStatus struct {
	// Phase is the coarse state read by lib-bucket-provisioner clients.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// ObservedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions describe the claim in detail; Ready summarizes it.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// ObjectBucketClaim is a request for a bucket and credentials to it. The
// provisioner answers with an ObjectBucket, and a Secret and a ConfigMap of
// the same name and namespace as the claim.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=obc;obcs,categories=objectstorage
// +kubebuilder:printcolumn:name="StorageClass",type="string",JSONPath=".spec.storageClassName",description="StorageClass"
// +kubebuilder:printcolumn:name="Phase",type="string",JSONPath=".status.phase",description="Phase"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status",priority=1
// +kubebuilder:printcolumn:name="ObjectBucket",type="string",JSONPath=".spec.objectBucketName",priority=1
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type ObjectBucketClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ObjectBucketClaimSpec `json:"spec"`
	// +optional
	Status ObjectBucketClaimStatus `json:"status,omitempty"`
}

// ObjectBucketClaimList is a list of ObjectBucketClaims.
//
// +kubebuilder:object:root=true
type ObjectBucketClaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ObjectBucketClaim `json:"items"`
}
