package harness

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/driver/minio/adminapi"
	"github.com/bucketbroker/bucketbroker/internal/driver/minio/miniotest"
)

// MinIOBackend returns the MinIO server the environment names
// (miniotest.FromEnv: it skips or fails the test without one), as its root
// user, with prefix starting the names of what the broker under test makes
// there (the server is shared by every test that runs against it).
func MinIOBackend(t testing.TB, prefix string) Backend {
	t.Helper()
	srv := miniotest.FromEnv(t)
	return Backend{S3: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, Prefix: prefix, MinIO: true}
}

// MinIO returns a broker on the minio driver against backend (see
// MinIOBackend), with its own SQLite store. Its names start with
// backend.Prefix.
func MinIO(t testing.TB, binary string, backend Backend) *Broker {
	b := New(t, binary)
	b.embedded = false
	b.Backend = backend
	b.Args = []string{"--driver", "minio", "--s3-endpoint", backend.S3}
	if backend.Prefix != "" {
		b.Args = append(b.Args, "--name-prefix", backend.Prefix)
	}
	b.Env = []string{"BUCKETBROKER_S3_ROOT_ACCESS_KEY=" + backend.AccessKey, "BUCKETBROKER_S3_ROOT_SECRET_KEY=" + backend.SecretKey}
	return b
}

// Admin returns a client of a MinIO backend's admin API, as its root user.
func (be Backend) Admin() (*adminapi.Client, error) {
	if !be.MinIO {
		return nil, fmt.Errorf("backend %s is not a MinIO server", be.S3)
	}
	return adminapi.New(adminapi.Config{Endpoint: be.S3, AccessKey: be.AccessKey, SecretKey: be.SecretKey})
}

// minioKeys is Keys on MinIO: the users come from the admin API, and a
// user's keys are its service accounts, the keys the minio driver hands
// out. A MinIO user's own access key (its name) is not listed: the driver
// sets a random secret for it that no one keeps.
func (be Backend) minioKeys() (map[string][]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := be.Admin()
	if err != nil {
		return nil, err
	}
	users, err := c.ListUsers(ctx)
	if err != nil {
		return nil, fmt.Errorf("list users: %w", err)
	}
	m := map[string][]string{}
	for name := range users {
		if !be.ours(name) {
			continue
		}
		ks, err := c.ServiceAccounts(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("list service accounts of %s: %w", name, err)
		}
		m[name] = ks
	}
	return m, nil
}
