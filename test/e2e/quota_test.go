package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bucketbroker/bucketbroker/test/harness"
)

// Plans of quotaCatalog.
const (
	planSmall = "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1c01" // maxSize 1Mi
	planLarge = "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1c02" // maxSize 4Mi
)

// quotaCatalog is the built-in service with two plans limited by size,
// and extra (YAML, indented as a plan) appended.
func quotaCatalog(t *testing.T, extra string) string {
	t.Helper()
	doc := `services:
  - id: ` + serviceID + `
    name: s3-bucket
    description: An S3 bucket per instance
    bindable: true
    instances_retrievable: true
    plan_updateable: true
    plans:
      - id: ` + planSmall + `
        name: small
        description: 1 MiB
        bucketbroker: {quota: {maxSize: 1Mi}}
      - id: ` + planLarge + `
        name: large
        description: 4 MiB
        bucketbroker: {quota: {maxSize: 4Mi}}
` + extra
	path := filepath.Join(t.TempDir(), "catalog.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// quotaBroker is a broker on the minio driver (minioBroker) serving the
// catalog at path.
func quotaBroker(t *testing.T, catalog string) *harness.Broker {
	t.Helper()
	b := minioBroker(t)
	b.Args = append(b.Args, "--catalog", catalog)
	return b
}

// TestQuotaOnMinIO: a plan's size quota holds on MinIO. With the 1 MiB plan
// a bound key cannot write 2 MiB; after a plan change to 4 MiB it can; a
// change back lowers the limit again. The objects are the application's:
// purge_on_delete takes them with the bucket.
func TestQuotaOnMinIO(t *testing.T) {
	b := quotaBroker(t, quotaCatalog(t, ""))
	b.Start()
	inst := "/v2/service_instances/quota-" + randomHex(4)
	body := func(plan string) map[string]any {
		return map[string]any{"service_id": serviceID, "plan_id": plan, "organization_guid": "org", "space_guid": "space",
			"parameters": map[string]any{"purge_on_delete": true}}
	}
	untilDone(t, b, "PUT", inst, body(planSmall), http.StatusCreated)
	c := untilDone(t, b, "PUT", inst+"/service_bindings/app", map[string]any{"service_id": serviceID, "plan_id": planSmall},
		http.StatusCreated).Creds()
	big := strings.Repeat("x", 2<<20)
	if err := b.Backend.Put(c, "big", big); err == nil {
		t.Fatal("put of 2 MiB into an instance of the 1 MiB plan succeeded, want it refused")
	}
	if err := b.Backend.Put(c, "small", "fits"); err != nil {
		t.Fatalf("put of 4 bytes into an instance of the 1 MiB plan: %v", err)
	}

	untilDone(t, b, "PATCH", inst, map[string]any{"service_id": serviceID, "plan_id": planLarge}, http.StatusOK)
	if err := b.Backend.Put(c, "big", big); err != nil {
		t.Fatalf("put of 2 MiB after the plan changed to 4 MiB: %v", err)
	}
	untilDone(t, b, "PATCH", inst, map[string]any{"service_id": serviceID, "plan_id": planSmall}, http.StatusOK)
	if err := b.Backend.Put(c, "big2", big); err == nil {
		t.Error("put of 2 MiB after the plan changed back to 1 MiB succeeded, want it refused")
	}
	// The plan is what a GET of the instance says, and a restart keeps
	// the limit where it is.
	b.Stop()
	b.Start()
	if r := b.Do("GET", inst, nil); r.Code != http.StatusOK || r.Body["plan_id"] != planSmall {
		t.Errorf("GET after the changes: %v, want 200 with plan_id %s", r, planSmall)
	}
	if err := b.Backend.Put(c, "big2", big); err == nil {
		t.Error("put of 2 MiB after a restart succeeded, want it refused")
	}
	untilDone(t, b, "DELETE", inst+"/service_bindings/app?service_id="+serviceID+"&plan_id="+planSmall, nil, http.StatusOK)
	untilDone(t, b, "DELETE", inst+"?service_id="+serviceID+"&plan_id="+planSmall, nil, http.StatusOK)
}

// TestQuotaNeverIgnored: a plan whose quota the driver cannot enforce
// stops the start, naming the plan and the limit, on the embedded server
// (no quota at all) and on MinIO (no limit by object count).
func TestQuotaNeverIgnored(t *testing.T) {
	refused := func(t *testing.T, b *harness.Broker, says ...string) {
		t.Helper()
		if err := b.TryStart(); err == nil {
			b.Stop()
			t.Fatal("the broker started with a plan whose quota its driver cannot enforce")
		}
		for _, s := range says {
			if !strings.Contains(b.Log(), s) {
				t.Errorf("the refused start does not say %q:\n%s", s, harness.Tail(b.Log(), 2000))
			}
		}
	}
	t.Run("embedded", func(t *testing.T) {
		b := newBroker(t)
		b.Args = []string{"--catalog", quotaCatalog(t, "")}
		refused(t, b, `plan "small" of service "s3-bucket" asks for a bucket quota`, "cannot limit a bucket by size (maxSize)")
	})
	t.Run("minio", func(t *testing.T) {
		b := quotaBroker(t, quotaCatalog(t, `      - id: 6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1c03
        name: counted
        description: 1000 objects
        bucketbroker: {quota: {maxObjects: 1000}}
`))
		refused(t, b, `plan "counted" of service "s3-bucket" asks for a bucket quota`, "cannot limit a bucket by object count (maxObjects)")
	})
}
