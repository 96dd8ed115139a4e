package miniotest

import (
	"os"
	"strings"
	"testing"
)

// The environment variables that name the MinIO server.
const (
	EndpointEnv  = "BUCKETBROKER_TEST_MINIO_ENDPOINT"
	AccessKeyEnv = "BUCKETBROKER_TEST_MINIO_ACCESS_KEY"
	SecretKeyEnv = "BUCKETBROKER_TEST_MINIO_SECRET_KEY"
)

// Server is a MinIO server: its URL and its root user's keys.
type Server struct {
	Endpoint, AccessKey, SecretKey string
}

// FromEnv returns the MinIO server the environment names. With none of the
// variables set it skips t, naming how to start one; with some set it
// fails t.
func FromEnv(t testing.TB) Server {
	t.Helper()
	names := []string{EndpointEnv, AccessKeyEnv, SecretKeyEnv}
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
	return Server{Endpoint: os.Getenv(EndpointEnv), AccessKey: os.Getenv(AccessKeyEnv), SecretKey: os.Getenv(SecretKeyEnv)}
}
