package e2e

import (
	"errors"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/test/harness"
)

// pgctl runs hack/postgres.sh for a cluster of this test's own, so that
// stopping it never disturbs other packages' tests.
func pgctl(t *testing.T, verb, dir string, env ...string) string {
	t.Helper()
	cmd := exec.Command("../../hack/postgres.sh", verb, dir)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("hack/postgres.sh %s: %v\n%s", verb, err, stderr)
	}
	return string(out)
}

// TestStoreOutage stops PostgreSQL under a running broker: requests fail
// fast with 503 and an OSB error body, nothing is half-written, and the
// broker serves again by itself once the database is back.
func TestStoreOutage(t *testing.T) {
	ext := externalServers(t)
	base, err := os.MkdirTemp("", "bb-outage-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o755); err != nil { // PostgreSQL runs as its own user
		t.Fatal(err)
	}
	dir := filepath.Join(base, "pg")
	t.Cleanup(func() { pgctl(t, "stop", dir); os.RemoveAll(base) })
	line := pgctl(t, "start", dir)
	dsn := strings.Trim(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "export BUCKETBROKER_TEST_POSTGRES_DSN=")), "'")

	b := harness.External(t, binary, harness.Backend{S3: ext.s3, IAM: ext.iam, AccessKey: ext.ak, SecretKey: ext.sk,
		Prefix: "o" + randomHex(3)})
	b.Env = append(b.Env, "BUCKETBROKER_STORE="+dsn)
	b.Start()
	untilDone(t, b, "PUT", "/v2/service_instances/before", provisionBody, http.StatusCreated)

	pgctl(t, "stop", dir)
	start := time.Now()
	r := b.Do("PUT", "/v2/service_instances/during", provisionBody)
	if r.Code != http.StatusServiceUnavailable || r.Body["description"] == nil {
		t.Fatalf("provision while the database is down: %d %v %v, want 503 with a description", r.Code, r.Body, r.Err)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("the 503 took %v; it should fail fast", took)
	}
	if r := b.Do("GET", "/readyz", nil); r.Code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while the database is down = %d, want 503", r.Code)
	}

	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	pgctl(t, "start", dir, "PG_PORT="+u.Port()) // the same address, as after a failover
	// Service resumes by itself: the retried request succeeds, once.
	untilDone(t, b, "PUT", "/v2/service_instances/during", provisionBody, http.StatusCreated, http.StatusOK)
	untilDone(t, b, "PUT", "/v2/service_instances/during", provisionBody, http.StatusOK)
	untilDone(t, b, "PUT", "/v2/service_instances/before", provisionBody, http.StatusOK)
	for _, id := range []string{"before", "during"} {
		untilDone(t, b, "DELETE", "/v2/service_instances/"+id+deleteQuery, nil, http.StatusOK)
	}
}
