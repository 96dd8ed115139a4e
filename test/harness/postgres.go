package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
)

// PostgresDSNEnv names the test PostgreSQL server (hack/with-test-servers.sh
// sets it).
const PostgresDSNEnv = "BUCKETBROKER_TEST_POSTGRES_DSN"

// PostgresSchema makes an empty schema on the test PostgreSQL server and
// returns a DSN whose search_path is that schema, so that tests never see
// each other's rows. Without a server the test is skipped, or fails when
// CI is "true": CI must never silently skip the real database.
func PostgresSchema(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(PostgresDSNEnv)
	if dsn == "" {
		msg := PostgresDSNEnv + " is not set: run through hack/with-test-servers.sh (make test)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "t_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
