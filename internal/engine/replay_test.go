package engine_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/bucketbroker/bucketbroker/internal/catalog"
)

// TestReplayAfterCatalogChange pins the rule Provision and Bind share
// (creation.check): an exact replay of a live instance or binding is
// answered from its record as it was accepted, also after a restart with a
// catalog whose schemas no longer accept its parameters, while a new
// request, or a different one under the same id, is held to the catalog
// as it is now.
func TestReplayAfterCatalogChange(t *testing.T) {
	h := newHarness(t)
	labels := map[string]any{"labels": map[string]any{"team": "a"}}
	inst := instancePth + newID()
	h.want(h.do("PUT", inst, provisionBody(planStd, labels)), http.StatusCreated, "provision")
	b := inst + "/service_bindings/" + newID()
	wo := bindBody(planStd, map[string]any{"access": "write-only"})
	first := h.want(h.do("PUT", b, wo), http.StatusCreated, "bind")

	// The same catalog, but no labels and no write-only bindings.
	doc, err := json.Marshal(catalog.Default())
	if err != nil {
		t.Fatal(err)
	}
	tight := strings.ReplaceAll(string(doc), `"enum":["read-write","read-only","write-only"]`, `"enum":["read-write","read-only"]`)
	tight = strings.ReplaceAll(tight, `"maxProperties":10`, `"maxProperties":0`)
	if !strings.Contains(tight, `"enum":["read-write","read-only"]`) || !strings.Contains(tight, `"maxProperties":0`) {
		t.Fatalf("the test's catalog edit no longer matches the built-in catalog: %s", doc)
	}
	cat, err := catalog.Parse([]byte(tight))
	if err != nil {
		t.Fatal(err)
	}
	p := newHarness(t, harnessOpts{peer: h, catalog: cat})

	p.want(p.do("PUT", inst, provisionBody(planStd, labels)), http.StatusOK, "provision replay")
	again := p.want(p.do("PUT", b, wo), http.StatusOK, "bind replay")
	if again.creds()["access_key_id"] != first.creds()["access_key_id"] || again.creds()["secret_access_key"] != first.creds()["secret_access_key"] {
		t.Error("the bind replay answered other credentials")
	}

	p.want(p.do("PUT", instancePth+newID(), provisionBody(planStd, labels)), http.StatusBadRequest, "new provision")
	p.want(p.do("PUT", inst+"/service_bindings/"+newID(), wo), http.StatusBadRequest, "new bind")
	// A different request under a live id is checked before it is refused.
	p.want(p.do("PUT", inst, provisionBody(planStd, map[string]any{"labels": map[string]any{"team": "b"}})), http.StatusBadRequest, "different provision")
	p.want(p.do("PUT", b, bindBody(planStd, map[string]any{"access": "write-only", "x": 1})), http.StatusBadRequest, "different bind")
}
