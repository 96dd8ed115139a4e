package e2e

import (
	"net/http"
	"testing"

	"github.com/bucketbroker/bucketbroker/test/harness"
)

var (
	provisionBody = harness.ProvisionBody
	bindBody      = harness.BindBody
	deleteQuery   = harness.DeleteQuery
)

// TestRestartKeepsEverything: instances, bindings and objects survive a
// graceful restart on the same data dir, and duplicate requests after it
// answer from the stored records.
func TestRestartKeepsEverything(t *testing.T) {
	b := newBroker(t)
	b.Start()
	inst := "/v2/service_instances/keep"
	untilDone(t, b, "PUT", inst, provisionBody, http.StatusCreated)
	c := untilDone(t, b, "PUT", inst+"/service_bindings/b", bindBody, http.StatusCreated).Creds()
	if err := b.Backend.Works(c); err != nil {
		t.Fatal(err)
	}
	b.Stop()
	b.Start()
	untilDone(t, b, "PUT", inst, provisionBody, http.StatusOK)
	again := untilDone(t, b, "PUT", inst+"/service_bindings/b", bindBody, http.StatusOK).Creds()
	if again["secret_access_key"] != c["secret_access_key"] {
		t.Error("credentials changed across a restart")
	}
	if err := b.Backend.Works(again); err != nil {
		t.Errorf("credentials do not work after a restart: %v", err)
	}
}
