package osb_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/bucket"
	"github.com/bucketbroker/bucketbroker/internal/catalog"
	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/osb"
	"github.com/bucketbroker/bucketbroker/internal/secretbox"
	"github.com/bucketbroker/bucketbroker/internal/store"
	"github.com/bucketbroker/bucketbroker/internal/store/sqlite"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// fuzzCatalog has a plan without schemas, as an operator's catalog may
// (any parameters reach the engine and the store), and one with the
// built-in plans' instance schema.
const fuzzCatalog = `{"services":[{"id":"svc","name":"s3","description":"d","bindable":true,"plan_updateable":true,"plans":[
 {"id":"loose","name":"loose","description":"no schemas"},
 {"id":"std","name":"std","description":"labels","schemas":{"service_instance":{"create":{"parameters":
  {"type":"object","properties":{"labels":{"type":"object","additionalProperties":{"type":"string","maxLength":256}}}}}}}}]}]}`

// acceptingDriver is a backend that accepts what S3 accepts: the driver
// is not under test here, the way from the request to the store and back
// is.
type acceptingDriver struct{}

func (acceptingDriver) EnsureBucket(_ context.Context, s driver.BucketSpec) error {
	return driver.CheckTags(s.Tags, 1)
}
func (acceptingDriver) DeleteBucket(context.Context, string, string, bool) error { return nil }
func (acceptingDriver) EnsureCredential(_ context.Context, s driver.CredentialSpec) (driver.Credential, error) {
	if s.Keys == driver.KeepOnlyKey {
		return driver.Credential{AccessKeyID: s.KeyID}, nil
	}
	return driver.Credential{AccessKeyID: "AKIAFUZZ", SecretAccessKey: "secret"}, nil
}
func (acceptingDriver) RevokeCredential(context.Context, string, string) error { return nil }
func (acceptingDriver) Observe(context.Context, driver.ObserveRequest) (driver.Observation, error) {
	return driver.Observation{}, nil
}

// FuzzStoredRequest follows a request from its bytes to the store and back
// after a restart: the real door, the real engine and a real SQLite store.
// Whatever the body (nesting near encoding/json's limit in any free-form
// field, labels S3 refuses, sizes at the limits), the broker must not
// answer 5xx, a refused request must store nothing, and every record must
// still be readable after the store is closed and opened again: a record
// that cannot be decoded would answer 503 for its id forever.
func FuzzStoredRequest(f *testing.F) {
	deep := func(n int) string { return strings.Repeat(`{"a":`, n-1) + `{}` + strings.Repeat(`}`, n-1) }
	const org = `"organization_guid":"o","space_guid":"s"`
	seeds := []struct {
		route uint8
		body  string
	}{
		{0, `{"service_id":"svc","plan_id":"loose",` + org + `,"parameters":{"a":1},"context":{"platform":"x"}}`},
		{0, `{"service_id":"svc","plan_id":"loose",` + org + `,"parameters":` + deep(9999) + `}`},
		{0, `{"service_id":"svc","plan_id":"loose",` + org + `,"context":` + deep(9999) + `}`},
		{0, `{"service_id":"svc","plan_id":"loose",` + org + `,"parameters":` + deep(engine.MaxFreeFormDepth) + `}`},
		{0, `{"service_id":"svc","plan_id":"std",` + org + `,"parameters":{"labels":{"k":"☃"}}}`},
		{0, `{"service_id":"svc","plan_id":"std",` + org + `,"parameters":{"labels":{"k":"` + strings.Repeat("ü", 256) + `"}}}`},
		{0, `{"service_id":"svc","plan_id":"loose",` + org + `,"parameters":{"a":"` + strings.Repeat("[{", 500) + `\"}"}}`},
		{1, `{"service_id":"svc","parameters":` + deep(9999) + `}`},
		{1, `{"service_id":"svc","parameters":{"b":` + deep(engine.MaxFreeFormDepth-1) + `},"context":` + deep(engine.MaxFreeFormDepth) + `}`},
		{1, `{"service_id":"svc","parameters":{"b":` + deep(9997) + `}}`},
		{1, `{"service_id":"svc","parameters":{"z":"` + strings.Repeat("x", engine.MaxFreeFormBytes-16) + `"}}`},
		{2, `{"service_id":"svc","plan_id":"loose","bind_resource":` + deep(9999) + `}`},
		{2, `{"service_id":"svc","plan_id":"loose","parameters":` + deep(9999) + `}`},
		{2, `{"service_id":"svc","plan_id":"loose","context":{"a":[` + deep(engine.MaxFreeFormDepth-1) + `]}}`},
	}
	for _, s := range seeds {
		f.Add(s.route, []byte(s.body))
	}
	cat, err := catalog.Parse([]byte(fuzzCatalog))
	if err != nil {
		f.Fatal(err)
	}
	catJSON, err := cat.JSON()
	if err != nil {
		f.Fatal(err)
	}
	key := make([]byte, secretbox.KeySize)
	box, err := secretbox.New(key)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		ctx := context.Background()
		path, st, eng, send := storedBroker(t, cat, catJSON, box)
		// An instance for update and bind to act on.
		if rec := send(http.MethodPut, "/v2/service_instances/i1",
			[]byte(`{"service_id":"svc","plan_id":"loose","organization_guid":"o","space_guid":"s"}`)); rec.Code != http.StatusCreated {
			t.Fatalf("provision i1: %d %s", rec.Code, rec.Body)
		}
		routes := []struct{ method, target string }{
			{http.MethodPut, "/v2/service_instances/i2"},
			{http.MethodPatch, "/v2/service_instances/i1"},
			{http.MethodPut, "/v2/service_instances/i1/service_bindings/b1"},
		}
		rt := routes[int(route)%len(routes)]
		rec := send(rt.method, rt.target, body)
		if rec.Code >= 500 {
			t.Fatalf("%s %s with %q: %d %s", rt.method, rt.target, truncate(body), rec.Code, rec.Body)
		}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := eng.Shutdown(sctx); err != nil {
			t.Fatal(err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}

		// The restart: every record reads back.
		st, err = sqlite.Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		bad, err := store.FindUnreadable(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		if len(bad) > 0 {
			t.Fatalf("%s %s with %q (answered %d) left unreadable records: %+v", rt.method, rt.target, truncate(body), rec.Code, bad)
		}
		recs, err := st.List(ctx, engine.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]bool{}
		for _, r := range recs {
			kinds[fmt.Sprintf("%s/%s", r.Kind, r.ID)] = true
			if _, err := st.Get(ctx, r.Kind, r.ID); err != nil {
				t.Fatalf("Get %s/%s after the restart: %v", r.Kind, r.ID, err)
			}
		}
		if rec.Code >= 400 {
			// Refused: nothing new stored (an update changes i1 only by
			// a failed operation, and a refused one not at all).
			for _, k := range []string{"instance/i2", "binding/b1"} {
				if kinds[k] {
					t.Errorf("refused %s %s (%d %s) stored %s", rt.method, rt.target, rec.Code, rec.Body, k)
				}
			}
		}
		if !json.Valid(rec.Body.Bytes()) {
			t.Errorf("answer is not JSON: %q", rec.Body)
		}
	})
}

// storedBroker starts the real door and engine on a new SQLite store at
// path, with a backend that accepts what S3 accepts.
func storedBroker(t *testing.T, cat *catalog.Catalog, catJSON []byte, box *secretbox.Box) (
	path string, st *sqlite.Store, eng *engine.Engine, send func(method, target string, body []byte) *httptest.ResponseRecorder,
) {
	t.Helper()
	ctx := context.Background()
	path = filepath.Join(t.TempDir(), "state.db")
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	bb, err := bucket.New(bucket.Options{Driver: acceptingDriver{}, Catalog: cat})
	if err != nil {
		t.Fatal(err)
	}
	eng, err = engine.New(engine.Options{Store: st, Backends: []engine.Backend{bb}, Catalog: cat, Box: box,
		Logger: slog.New(slog.DiscardHandler), SyncTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	h, err := osb.NewHandler(osb.Options{Instances: eng, Bindings: eng, Catalog: catJSON, Username: "u", Password: "p"})
	if err != nil {
		t.Fatal(err)
	}
	send = func(method, target string, body []byte) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, target, bytes.NewReader(body))
		req.SetBasicAuth("u", "p")
		req.Header.Set("X-Broker-API-Version", "2.17")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	return path, st, eng, send
}

// TestMergedParametersBounded: an update merges its parameters into the
// instance's key by key, so updates each within the limits could grow a
// plan without schema's parameters, and the record, without end. The
// merged parameters are held to the same limit: 400, and the instance
// keeps what it had.
func TestMergedParametersBounded(t *testing.T) {
	cat, err := catalog.Parse([]byte(fuzzCatalog))
	if err != nil {
		t.Fatal(err)
	}
	catJSON, _ := cat.JSON()
	box, _ := secretbox.New(make([]byte, secretbox.KeySize))
	_, st, eng, send := storedBroker(t, cat, catJSON, box)
	t.Cleanup(func() {
		_ = eng.Shutdown(context.Background())
		_ = st.Close()
	})
	if rec := send(http.MethodPut, "/v2/service_instances/i1",
		[]byte(`{"service_id":"svc","plan_id":"loose","organization_guid":"o","space_guid":"s"}`)); rec.Code != http.StatusCreated {
		t.Fatalf("provision: %d %s", rec.Code, rec.Body)
	}
	half := strings.Repeat("x", engine.MaxFreeFormBytes/2)
	if rec := send(http.MethodPatch, "/v2/service_instances/i1", []byte(`{"service_id":"svc","parameters":{"a":"`+half+`"}}`)); rec.Code != http.StatusOK {
		t.Fatalf("first update: %d %s", rec.Code, rec.Body)
	}
	rec := send(http.MethodPatch, "/v2/service_instances/i1", []byte(`{"service_id":"svc","parameters":{"b":"`+half+`"}}`))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "parameters") {
		t.Fatalf("second update, merged past the limit: %d %s, want 400 naming the parameters", rec.Code, rec.Body)
	}
	r, err := st.Get(context.Background(), engine.KindInstance, "i1")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(r.Request.Parameters), `"b"`) || r.Phase != engine.PhaseReady {
		t.Errorf("instance after the refused update: phase %s, parameters of %d bytes with b", r.Phase, len(r.Request.Parameters))
	}
}

func truncate(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + fmt.Sprintf("... (%d bytes)", len(b))
	}
	return string(b)
}
