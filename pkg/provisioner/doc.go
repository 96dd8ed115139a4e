// Package provisioner lets a storage vendor run bucketbroker's
// ObjectBucketClaim controller from its own Go program with its own driver,
// as Rook and NooBaa do with lib-bucket-provisioner today.
//
// The vendor implements driver.Driver (pkg/driver; its conformance suite is
// pkg/driver/drivertest), builds a controller-runtime manager with
// ManagerOptions (a scheme with the objectbucket.io types and a cache that
// holds only the Secrets and ConfigMaps labeled for this provisioner), and
// adds the controller with New(...).SetupWithManager(mgr). Claims whose
// StorageClass names Options.ProvisionerName get a bucket, a credential
// scoped to it, an ObjectBucket, and a Secret and a ConfigMap with the keys
// lib-bucket-provisioner wrote; every step survives retries and crashes (see
// internal/objectbucket for the model).
//
// See examples/vendor-provisioner for a complete program.
package provisioner
