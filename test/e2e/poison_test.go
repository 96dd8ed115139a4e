package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // the SQLite state file, spoiled behind the broker's back

	"github.com/bucketbroker/bucketbroker/test/harness"
)

// deepJSON is a JSON object nested n levels deep.
func deepJSON(n int) json.RawMessage {
	return json.RawMessage(strings.Repeat(`{"a":`, n-1) + `{}` + strings.Repeat(`}`, n-1))
}

// TestPoisonedInput runs the real binary on the embedded S3 server, with
// SQLite and with PostgreSQL state, against the two classes of poisoned
// input: free-form fields nested near encoding/json's limit, and labels S3
// refuses as tags. Both are 400s that change nothing. A record such input
// would leave in the store (here, written into the database behind the
// broker's back) does not stop the process from starting, is shown on
// /readyz, listed and repaired by `admin records`, after which its
// instance deprovisions cleanly.
func TestPoisonedInput(t *testing.T) {
	for _, pg := range []bool{false, true} {
		name := map[bool]string{false: "sqlite", true: "postgres"}[pg]
		t.Run(name, func(t *testing.T) {
			b := newBroker(t)
			var storeArgs []string
			spoil := spoilSQLite(filepath.Join(b.DataDir, "bucketbroker.db"))
			if pg {
				dsn := harness.PostgresSchema(t)
				b.Env = append(b.Env, "BUCKETBROKER_STORE="+dsn)
				storeArgs = []string{"--store", dsn}
				spoil = spoilPostgres(dsn)
			}
			b.Start()

			// Poisoned requests: 400, nothing stored, nothing created.
			inst := "/v2/service_instances/poisoned"
			for what, body := range map[string]map[string]any{
				"deep parameters": {"service_id": serviceID, "plan_id": planStd, "organization_guid": "o", "space_guid": "s", "parameters": deepJSON(9999)},
				"deep context":    {"service_id": serviceID, "plan_id": planStd, "organization_guid": "o", "space_guid": "s", "context": deepJSON(9999)},
				"snowman label":   {"service_id": serviceID, "plan_id": planStd, "organization_guid": "o", "space_guid": "s", "parameters": map[string]any{"labels": map[string]any{"k": "☃"}}},
				"long label":      {"service_id": serviceID, "plan_id": planStd, "organization_guid": "o", "space_guid": "s", "parameters": map[string]any{"labels": map[string]any{"k": strings.Repeat("ü", 256)}}},
			} {
				for _, q := range []string{"", "?accepts_incomplete=true"} {
					if r := b.Do("PUT", inst+q, body); r.Code != http.StatusBadRequest {
						t.Errorf("%s%s: %s, want 400", what, q, r)
					}
				}
			}
			if r := b.Do("GET", inst, nil); r.Code != http.StatusNotFound {
				t.Errorf("GET after the refused provisions: %s, want 404", r)
			}
			if n := buckets(t, b); len(n) != 0 {
				t.Errorf("buckets after refused provisions: %v", n)
			}

			keep := "/v2/service_instances/keep"
			untilDone(t, b, "PUT", keep, provisionBody, http.StatusCreated)
			deep := map[string]any{"service_id": serviceID, "plan_id": planStd, "app_guid": "app", "bind_resource": deepJSON(9999)}
			if r := b.Do("PUT", keep+"/service_bindings/deep", deep); r.Code != http.StatusBadRequest {
				t.Errorf("bind with a deep bind_resource: %s, want 400", r)
			}
			untilDone(t, b, "PUT", keep+"/service_bindings/b", bindBody, http.StatusCreated)
			b.Stop()

			// A record written outside bucketbroker, in flight.
			spoil(t, "binding", "b")
			if err := b.TryStart(); err != nil {
				t.Fatalf("start with an unreadable record: %v", err)
			}
			if !b.LogShows(30*time.Second, `msg="Record cannot be read and is skipped`, "id=b instance=keep") {
				t.Errorf("start-up logged nothing about the unreadable binding")
			}
			ready := b.Do("GET", "/readyz", nil)
			if ready.Code != http.StatusOK || !strings.Contains(ready.String(), "admin records") {
				t.Errorf("/readyz = %s, want 200 with a warning", ready)
			}
			other := "/v2/service_instances/other"
			untilDone(t, b, "PUT", other, provisionBody, http.StatusCreated)
			untilDone(t, b, "DELETE", other+deleteQuery, nil, http.StatusOK)

			code, out := admin(t, append([]string{"records", "--data-dir", b.DataDir}, storeArgs...)...)
			if code != 2 || !strings.Contains(out, "binding b of instance keep") {
				t.Fatalf("admin records: exit %d:\n%s\nwant 2 and the binding", code, out)
			}
			if code, out := admin(t, append([]string{"records", "repair", "--all", "--data-dir", b.DataDir}, storeArgs...)...); code != 0 || !strings.Contains(out, "binding b repaired") {
				t.Fatalf("admin records repair --all: exit %d:\n%s", code, out)
			}
			if code, out := admin(t, append([]string{"records", "--data-dir", b.DataDir}, storeArgs...)...); code != 0 {
				t.Fatalf("admin records after the repair: exit %d:\n%s", code, out)
			}

			untilDone(t, b, "DELETE", keep+deleteQuery, nil, http.StatusOK)
			if n := buckets(t, b); len(n) != 0 {
				t.Errorf("buckets after the deprovision: %v", n)
			}
			if k := keys(t, b); len(k) != 0 {
				t.Errorf("users after the deprovision: %v", k)
			}
		})
	}
}

// admin runs `bucketbroker admin ARGS...` and returns its exit status and
// output.
func admin(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, append([]string{"admin"}, args...)...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("admin %v: %v", args, err)
	return 0, ""
}

const spoilSQL = `UPDATE records SET data = replace(data, '"fingerprint":', '"x":' || %s || ',"fingerprint":'), op_state = 'in progress' WHERE kind = %s AND id = %s`

// spoilSQLite and spoilPostgres nest a field of a record as deep as
// encoding/json allows, which makes the record unreadable, and put its
// operation in progress, as a write outside bucketbroker could leave it.
func spoilSQLite(path string) func(t *testing.T, kind, id string) {
	return func(t *testing.T, kind, id string) {
		t.Helper()
		db, err := sql.Open("sqlite", "file:"+path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		q := strings.NewReplacer("%s", "?").Replace(spoilSQL)
		if _, err := db.Exec(q, string(deepJSON(10000)), kind, id); err != nil {
			t.Fatalf("spoil %s/%s: %v", kind, id, err)
		}
	}
}

func spoilPostgres(dsn string) func(t *testing.T, kind, id string) {
	return func(t *testing.T, kind, id string) {
		t.Helper()
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		q := `UPDATE records SET data = replace(data::text, '"fingerprint":', '"x":' || $1 || ',"fingerprint":')::json, op_state = 'in progress' WHERE kind = $2 AND id = $3`
		if _, err := conn.Exec(ctx, q, string(deepJSON(10000)), kind, id); err != nil {
			t.Fatalf("spoil %s/%s: %v", kind, id, err)
		}
	}
}
