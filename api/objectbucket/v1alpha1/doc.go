// Package v1alpha1 holds the objectbucket.io/v1alpha1 API: ObjectBucketClaim
// and ObjectBucket, wire-compatible with the CRDs that
// kube-object-storage/lib-bucket-provisioner defined and that Rook and NooBaa
// users already have in their clusters.
//
// An ObjectBucketClaim (namespaced, short name obc) is a user's request for a
// bucket through a StorageClass whose provisioner names bucketbroker. An
// ObjectBucket (cluster-scoped, short name ob) records the bucket that was
// provisioned for one claim: its endpoint and the claim it is bound to, by
// UID. The application receives the credentials in a Secret and the endpoint
// in a ConfigMap, both named like the claim; credentials never appear in
// either resource.
//
// Compatibility is the first rule: every field name and JSON shape of the
// original API is kept, so existing manifests and objects are read unchanged.
// bucketbroker only adds what the original lacked: status.conditions and
// status.observedGeneration, which old clients ignore.
//
// spec.objectBucketName on the claim is the authoritative record of binding.
// A CRD that leaves it out of its schema makes the API server prune it on
// every write, which made lib-bucket-provisioner provision again and again
// (rook#6650); config/crd/test/pruning holds such a CRD so tests can
// reproduce that.
//
// The package imports only the standard library and apimachinery, so that API
// consumers do not pull in controller-runtime or client-go.
//
// +kubebuilder:object:generate=true
// +groupName=objectbucket.io
package v1alpha1
