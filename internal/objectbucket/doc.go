// Package objectbucket will hold bucketbroker's Kubernetes door: the
// controller that turns an ObjectBucketClaim (objectbucket.io/v1alpha1, the
// API Rook and NooBaa users already have) into a bucket, an ObjectBucket
// bound to the claim by UID, and a Secret and a ConfigMap named like the
// claim. The controller is not written yet.
//
// For now the package holds the envtest suite that every part of it will run
// against: a real kube-apiserver and etcd, built by hack/envtest-assets.sh,
// with the CRDs generated from api/objectbucket/v1alpha1 into
// config/crd/bases. It shows that the claims and buckets Rook, NooBaa and
// lib-bucket-provisioner wrote are accepted unchanged, and it reproduces the
// pruning of spec.objectBucketName by a CRD that lacks the field (rook#6650),
// the failure that made lib-bucket-provisioner provision the same claim again
// and again; the controller must not be fooled by it.
package objectbucket
