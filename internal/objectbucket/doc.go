// Package objectbucket is bucketbroker's Kubernetes door: the controller that
// turns an ObjectBucketClaim (objectbucket.io/v1alpha1, the API Rook and
// NooBaa users already have) into a bucket, a credential scoped to it, an
// ObjectBucket bound to the claim by UID, and a Secret and a ConfigMap named
// like the claim, with the keys lib-bucket-provisioner wrote.
//
// The reconciler is level-based. Each pass reads the claim, makes sure it
// carries the finalizer, the provisioner and the chosen bucket name (one
// write, before anything exists elsewhere), then runs small phases that each
// make one thing so: the ObjectBucket (the durable record: bucket and user
// names, owner mark, reclaim policy, whether the bucket is the claim's), the
// bucket, the credential and its Secret, the ConfigMap, and the binding. One
// deferred status patch writes phase and the Ready and Provisioned
// conditions.
//
// Everything is named from the claim's UID: the ObjectBucket (obc-<uid>,
// found again even when a CRD prunes spec.objectBucketName), the backend
// user and the owner mark (pkg/driver). The CRDs users already have differ
// in what they prune (NooBaa's drops everything under spec.claimRef and
// every status field but phase), so what the controller reads back lives
// in the ObjectBucket's metadata: the claim's UID in a label, its
// namespace/name and the record in annotations (record.go). The spec
// fields say the same for tools. Writes go with fieldValidation=Ignore
// and each answer is compared with what was sent: a field the schema
// dropped is said once (log line and Event), and pruned status fields are
// no longer written. A generated bucket name is a
// function of the UID too, and is recorded on the claim before the bucket is
// created. The Secret is the record of the access key: its
// AWS_ACCESS_KEY_ID is the key EnsureCredential keeps, so a key whose Secret
// was never written (a crash) is deleted on the next pass. A Secret or
// ConfigMap of the same name that is not controlled by the claim is never
// written; the claim goes Failed instead.
//
// The backend steps and their crash-safety rules (look before the first
// create attempt, record it, adopt an unmarked bucket or user only with the
// attempt recorded, never delete another owner's) are internal/ensure's,
// shared with the OSB engine. The ObjectBucket is where this door records
// the attempts: before it is created the controller looks at the bucket and
// user names (ensure.Look) and puts, in the same Create, an attempt flag for
// each name that is free or already the claim's. A name taken before the
// look fails the claim before anything is created, and is never touched; a
// later pass looks again, and records the flags it earns before its next
// backend change.
//
// Deletion works from the ObjectBucket alone, so a missing StorageClass
// never blocks it: revoke the credential, then (only once that succeeded: a
// deleted bucket frees its name) delete the bucket if the recorded policy
// is Delete (ensure.RevokeUser and ensure.DeleteBucket: what is not the
// claim's is left alone, with an Event), then delete the Secret and the ObjectBucket (the
// ConfigMap, which carries no finalizer, is left to the garbage collector
// through its owner reference), and drop the claim's finalizer only once
// the API server says each is gone: a delete preconditioned on the resourceVersion of an object
// with no finalizer left removes it in that request (none of these kinds
// has a grace period); an object someone else still holds is asked about
// with a Get on later passes.
//
// Reads come from the manager's cache. A pass whose cache is behind a write
// this process made for the claim (the claim, its ObjectBucket, Secret or
// ConfigMap at a version written over, or not there yet) is skipped until
// the cache catches up (writeSet: the expectations of Kubernetes' own
// controllers), so no pass redoes a write or mistakes the claim's own
// Secret for a missing one. The Secret and the ConfigMap of a claim being
// provisioned are then created without a read first: the cache holds every
// one of ours, and a Create that finds the name taken has found a user's
// object, which is read from the API server and never written. For the
// Secret, the key just made for it is revoked with its user before the
// claim goes Failed, and later passes of that claim read the API server
// before making a key again. Finalizers are removed with a JSON patch that
// tests the entry it removes, so a cached object a write behind is not a
// conflict. BenchmarkClaimLifecycle measures the requests and the time a
// claim costs (docs/performance.md).
//
// The tests run against envtest (a real kube-apiserver and etcd built by
// hack/envtest-assets.sh) and the embedded S3 server, one per test process.
package objectbucket
