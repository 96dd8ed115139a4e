package harness

import (
	"os"
	"strings"
	"testing"
)

// The MinIO server tests run against, named by the environment exactly as
// `hack/minio.sh start DIR` prints it.
const (
	EnvMinIOEndpoint  = "BUCKETBROKER_TEST_MINIO_ENDPOINT"
	EnvMinIOAccessKey = "BUCKETBROKER_TEST_MINIO_ACCESS_KEY"
	EnvMinIOSecretKey = "BUCKETBROKER_TEST_MINIO_SECRET_KEY"
)

// MinIOBackend is the MinIO server the environment names, with its root
// keys (Backend.IAM is empty: MinIO has no IAM API). With none of the
// variables set it skips the test, saying how to start one; with some set
// it fails.
func MinIOBackend(t testing.TB) Backend {
	t.Helper()
	names := []string{EnvMinIOEndpoint, EnvMinIOAccessKey, EnvMinIOSecretKey}
	var set, missing []string
	for _, n := range names {
		if os.Getenv(n) != "" {
			set = append(set, n)
		} else {
			missing = append(missing, n)
		}
	}
	switch {
	case len(set) == 0:
		t.Skipf(`no MinIO server: run eval "$(hack/minio.sh start /tmp/DIR)" to set %s (make test-minio does it all)`,
			strings.Join(names, ", "))
	case len(missing) > 0:
		t.Fatalf("%s set but %s unset: set all three (hack/minio.sh start prints them)",
			strings.Join(set, ", "), strings.Join(missing, ", "))
	}
	return Backend{S3: os.Getenv(EnvMinIOEndpoint), AccessKey: os.Getenv(EnvMinIOAccessKey), SecretKey: os.Getenv(EnvMinIOSecretKey)}
}
