// Package storage is the composition root of the storage side, shared by
// every command that needs it: serve (through internal/broker), the
// ObjectBucketClaim controller and admin audit. Start turns a Config, the
// storage flags (declared once, in cmd/bucketbroker), into a running
// driver.Driver: the s3iam driver against an external S3 + IAM endpoint, or
// against the embedded S3 + IAM server (internal/s3gateway) it starts in
// this process on the data dir.
//
// Start checks that the S3 + IAM server answers with the root credentials before
// it returns, so that a wrong endpoint or key is one clear error at start,
// not a failure on the first request. The embedded server's root keys, when
// the caller gives none, are generated once and kept in the data dir
// (s3-root-credentials.json, 0600), so that the users made under them keep
// working across restarts; Storage.GeneratedRootCredentials says so, and where, so that a
// caller can point the operator at the file instead of printing the secret.
//
// "Storage" is the S3 + IAM server and its driver; "backend" in this
// repository means one thing, an engine.Backend (the bucket service of
// internal/bucket, an upstream broker of internal/upstream).
package storage
