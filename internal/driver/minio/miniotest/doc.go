// Package miniotest names the MinIO server that tests run against: the
// driver's and the admin client's tests in internal/driver/minio, and the
// whole-system tests through test/harness, all read it from the same three
// environment variables, exactly as `hack/minio.sh start DIR` prints them.
//
// FromEnv returns that server and its root user's keys. With none of the
// variables set it skips the test, naming how to start a server (a
// developer without MinIO runs the rest); with only some set it fails the
// test, since a half-configured environment is a mistake to fix, not a
// server to do without.
//
// It is test support only: nothing that ships imports it.
package miniotest
