package osb

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/bucketbroker/bucketbroker/internal/engine"
)

// FuzzHandler sends arbitrary ids, query strings and bodies to the
// state-changing endpoints. Whatever arrives, the handler must not panic
// (a recovered panic would be a 500), must not answer 5xx (the fake engine
// always succeeds, so a 5xx can only come from decoding), must answer JSON,
// and must never call the engine with a request that lacks a required field
// or carries a non-object where an object belongs.
//
// It calls ServeHTTP in-process rather than through a server: the decoding
// under test is the same, and a fuzzer wants many executions per second.
func FuzzHandler(f *testing.F) {
	seeds := []struct {
		route       uint8
		id, q, body string
	}{
		{0, "i1", "accepts_incomplete=true", provisionJSON},
		{0, "i1", "", `{"service_id":"svc","plan_id":"plan","organization_guid":"org","space_guid":"space","parameters":{"a":[1,{"b":null}]},"context":{}}`},
		{0, "i1", "", `{"service_id":" ","plan_id":"plan","organization_guid":"org","space_guid":"space"}`},
		{0, "i\x00", "", provisionJSON},
		{0, "i1", "accepts_incomplete=tr%zz", `{"service_id":1}`},
		{0, "i1", "", `{"parameters":"x"`},
		{1, "i1", "", `{"service_id":"svc","plan_id":null,"parameters":[]}`},
		{1, "i1", "", `{"service_id":"svc","context":{"platform":"kubernetes"}}`},
		{2, "i1", "service_id=svc&plan_id=plan&accepts_incomplete=false", ``},
		{2, "i1", "service_id=&plan_id=plan", ``},
		{3, "b1", "accepts_incomplete=true", `{"service_id":"svc","plan_id":"plan","bind_resource":{"app_guid":"a"}}`},
		{3, "b1", "", `{"service_id":"svc","plan_id":"plan","bind_resource":"app"}`},
		{4, "b1", "service_id=svc&plan_id=plan", ``},
		{4, "", "service_id=svc", `garbage`},
		{0, strings.Repeat("x", 300), "", `[]`},
		{1, "..", "", `null`},
		{3, "b1", "", "\xff\xfe{}"},
	}
	for _, s := range seeds {
		f.Add(s.route, s.id, s.q, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, route uint8, id, rawQuery string, body []byte) {
		fake := validatingEngine(t)
		h, err := NewHandler(Options{
			Instances: fake, Bindings: fake,
			Catalog:  json.RawMessage(testCatalog),
			Username: testUser, Password: testPassword,
			MaxBodyBytes: 4096,
		})
		if err != nil {
			t.Fatal(err)
		}
		routes := []struct{ method, path string }{
			{http.MethodPut, "/v2/service_instances/%s"},
			{http.MethodPatch, "/v2/service_instances/%s"},
			{http.MethodDelete, "/v2/service_instances/%s"},
			{http.MethodPut, "/v2/service_instances/i1/service_bindings/%s"},
			{http.MethodDelete, "/v2/service_instances/i1/service_bindings/%s"},
		}
		rt := routes[int(route)%len(routes)]
		req := httptest.NewRequest(rt.method, fmt.Sprintf(rt.path, url.PathEscape(id)), bytes.NewReader(body))
		req.URL.RawQuery = rawQuery
		req.SetBasicAuth(testUser, testPassword)
		req.Header.Set(headerVersion, "2.17")
		rec := httptest.NewRecorder()

		h.ServeHTTP(rec, req)

		if rec.Code >= 500 {
			t.Fatalf("%s %s?%s with body %q: status %d: %s", rt.method, req.URL.Path, rawQuery, body, rec.Code, rec.Body)
		}
		if !json.Valid(rec.Body.Bytes()) || rec.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("answer %d is not JSON: %q", rec.Code, rec.Body)
		}
	})
}

// validatingEngine succeeds on every call after checking that the request
// is one the door should have let through.
func validatingEngine(t *testing.T) *fakeEngine {
	required := func(call string, fields ...field) {
		for _, f := range fields {
			if strings.TrimSpace(f.value) == "" {
				t.Errorf("%s called without %s", call, f.name)
			}
		}
	}
	objectOrNil := func(call, name string, raw json.RawMessage) {
		if raw != nil && (!json.Valid(raw) || raw[0] != '{') {
			t.Errorf("%s called with %s %q, not an object", call, name, raw)
		}
	}
	validID := func(call, name, id string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.SetPathValue(name, id)
		if _, err := pathID(r, name); err != nil {
			t.Errorf("%s called with bad %s %q: %v", call, name, id, err)
		}
	}
	done := engine.Result{Outcome: engine.OutcomeOK}
	return &fakeEngine{
		provision: func(r engine.ProvisionRequest) (engine.Result, error) {
			validID("Provision", "instance_id", r.InstanceID)
			required("Provision", field{"service_id", r.ServiceID}, field{"plan_id", r.PlanID},
				field{"organization_guid", r.OrganizationGUID}, field{"space_guid", r.SpaceGUID})
			objectOrNil("Provision", "parameters", r.Parameters)
			objectOrNil("Provision", "context", r.Context)
			return engine.Result{Outcome: engine.OutcomeCreated}, nil
		},
		update: func(r engine.UpdateRequest) (engine.Result, error) {
			validID("Update", "instance_id", r.InstanceID)
			required("Update", field{"service_id", r.ServiceID})
			objectOrNil("Update", "parameters", r.Parameters)
			objectOrNil("Update", "context", r.Context)
			return engine.Result{Outcome: engine.OutcomeAccepted, Operation: "op"}, nil
		},
		deprovision: func(r engine.DeprovisionRequest) (engine.Result, error) {
			validID("Deprovision", "instance_id", r.InstanceID)
			required("Deprovision", field{"service_id", r.ServiceID}, field{"plan_id", r.PlanID})
			return done, nil
		},
		bind: func(r engine.BindRequest) (engine.BindResult, error) {
			validID("Bind", "instance_id", r.InstanceID)
			validID("Bind", "binding_id", r.BindingID)
			required("Bind", field{"service_id", r.ServiceID}, field{"plan_id", r.PlanID})
			objectOrNil("Bind", "parameters", r.Parameters)
			objectOrNil("Bind", "context", r.Context)
			objectOrNil("Bind", "bind_resource", r.BindResource)
			return engine.BindResult{Result: engine.Result{Outcome: engine.OutcomeCreated}, Credentials: &engine.Credentials{}}, nil
		},
		unbind: func(r engine.UnbindRequest) (engine.Result, error) {
			validID("Unbind", "instance_id", r.InstanceID)
			validID("Unbind", "binding_id", r.BindingID)
			required("Unbind", field{"service_id", r.ServiceID}, field{"plan_id", r.PlanID})
			return done, nil
		},
	}
}
