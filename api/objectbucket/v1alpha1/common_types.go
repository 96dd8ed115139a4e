package v1alpha1

// Phase is the coarse state of a claim or a bucket, as lib-bucket-provisioner
// reported it. Clients written for that library read only the phase, so it
// is kept up to date; bucketbroker's own detail lives in status.conditions.
//
// +kubebuilder:validation:Enum=Pending;Bound;Released;Failed
type Phase string

const (
	// PhasePending means provisioning has started and is not finished.
	PhasePending Phase = "Pending"
	// PhaseBound means the bucket exists, the ObjectBucket is bound to the claim,
	// and the claim's Secret and ConfigMap are written.
	PhaseBound Phase = "Bound"
	// PhaseReleased means the claim is gone (or going) and its bucket is being
	// deleted or, for Retain and brownfield buckets, its access revoked.
	PhaseReleased Phase = "Released"
	// PhaseFailed means provisioning failed in a way a retry cannot fix; the
	// conditions say why.
	PhaseFailed Phase = "Failed"
)

// Condition types set by bucketbroker.
const (
	// ConditionReady is True when the claim is bound and its Secret and
	// ConfigMap are current.
	ConditionReady = "Ready"
)
