// Package harness runs the bucketbroker binary for whole-system tests: it
// builds the binary once per test package, starts and stops it (or lets it
// die at a crash point) on a data dir that survives restarts, speaks OSB to
// it as a platform would, and inspects the S3 + IAM backend behind it (on
// MinIO, S3 and MinIO's admin API) by listing, the way an operator would
// check for leaks. It also reads a
// running broker's resident memory from /proc and times admin audit, for
// the scale benchmark.
//
// It is test support only: test/e2e and test/crash import it, nothing that
// ships does.
package harness
