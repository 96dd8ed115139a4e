// Package e2e tests the bucketbroker binary as a platform sees it: a real
// process with its embedded S3 + IAM server and SQLite state, driven over
// HTTP, killed at named crash points and started again on the same data
// dir.
package e2e
