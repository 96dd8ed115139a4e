// Package e2e tests the bucketbroker binary as a platform sees it: a real
// process with its embedded S3 + IAM server and SQLite state, driven over
// HTTP, killed at named crash points and started again on the same data
// dir. The TestMinIO tests (minio_test.go; make test-minio) run the same
// flows on --driver minio against a real MinIO server, and skip without
// one.
//
// TestScale and BenchmarkScale (scale_test.go) provision and bind many
// instances on one broker and report what grows with the count: latency,
// resident memory, restart to ready, /readyz, the data dir per instance and
// admin audit's rate (issue 17; make bench-scale, docs/performance.md).
package e2e
