package osb

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/engine"
)

// These tests check that a request reaches the engine exactly as decoded, or
// not at all.

func TestProvisionRequests(t *testing.T) {
	long := strings.Repeat("i", 255)
	cases := map[string]struct {
		reason     string
		path       string
		body       string
		header     map[string]string
		wantStatus int
		want       *engine.ProvisionRequest // nil: the engine must not be called
	}{
		"minimal": {
			reason:     "the four required fields are enough",
			path:       "/v2/service_instances/i1",
			body:       provisionJSON,
			wantStatus: http.StatusCreated,
			want:       &engine.ProvisionRequest{InstanceID: "i1", ServiceID: "svc", PlanID: "plan", OrganizationGUID: "org", SpaceGUID: "space"},
		},
		"everything": {
			reason: "parameters and context pass through byte for byte; the originating identity becomes Identity; maintenance_info.version becomes MaintenanceVersion; unknown fields are ignored",
			path:   "/v2/service_instances/i1?accepts_incomplete=true",
			body: `{"service_id":"svc","plan_id":"plan","organization_guid":"org","space_guid":"space",` +
				`"parameters":{"versioning": true},"context":{"platform":"kubernetes"},"maintenance_info":{"version":"1.0.0"},"x-vendor":[1]}`,
			header:     map[string]string{headerOriginatingIdentity: "kubernetes eyJ1c2VybmFtZSI6ImEifQ=="},
			wantStatus: http.StatusCreated,
			want: &engine.ProvisionRequest{
				InstanceID: "i1", ServiceID: "svc", PlanID: "plan", OrganizationGUID: "org", SpaceGUID: "space",
				Parameters:         json.RawMessage(`{"versioning": true}`),
				Context:            json.RawMessage(`{"platform":"kubernetes"}`),
				AcceptsIncomplete:  true,
				Identity:           "kubernetes eyJ1c2VybmFtZSI6ImEifQ==",
				MaintenanceVersion: "1.0.0",
			},
		},
		"null parameters and context": {
			reason:     "null is the same as absent",
			path:       "/v2/service_instances/i1",
			body:       `{"service_id":"svc","plan_id":"plan","organization_guid":"org","space_guid":"space","parameters":null,"context":null}`,
			wantStatus: http.StatusCreated,
			want:       &engine.ProvisionRequest{InstanceID: "i1", ServiceID: "svc", PlanID: "plan", OrganizationGUID: "org", SpaceGUID: "space"},
		},
		"empty maintenance_info": {
			reason:     "clients generated from the spec's OpenAPI document send {} on every PUT: the same as absent, so the fingerprint is too",
			path:       "/v2/service_instances/i1",
			body:       `{"service_id":"svc","plan_id":"plan","organization_guid":"org","space_guid":"space","maintenance_info":{}}`,
			wantStatus: http.StatusCreated,
			want:       &engine.ProvisionRequest{InstanceID: "i1", ServiceID: "svc", PlanID: "plan", OrganizationGUID: "org", SpaceGUID: "space"},
		},
		"maintenance_info with an empty version": {
			reason:     "an empty string counts as missing, and an object with nothing in it as absent",
			path:       "/v2/service_instances/i1",
			body:       `{"service_id":"svc","plan_id":"plan","organization_guid":"org","space_guid":"space","maintenance_info":{"version":""}}`,
			wantStatus: http.StatusCreated,
			want:       &engine.ProvisionRequest{InstanceID: "i1", ServiceID: "svc", PlanID: "plan", OrganizationGUID: "org", SpaceGUID: "space"},
		},
		"maintenance_info without a version": {
			reason:     "an object that says something (a description) but names no version is still a bad request",
			path:       "/v2/service_instances/i1",
			body:       `{"service_id":"svc","plan_id":"plan","organization_guid":"org","space_guid":"space","maintenance_info":{"description":"d"}}`,
			wantStatus: http.StatusBadRequest,
		},
		"accepts_incomplete false": {
			reason:     `"false" is accepted and means synchronous`,
			path:       "/v2/service_instances/i1?accepts_incomplete=false",
			body:       provisionJSON,
			wantStatus: http.StatusCreated,
			want:       &engine.ProvisionRequest{InstanceID: "i1", ServiceID: "svc", PlanID: "plan", OrganizationGUID: "org", SpaceGUID: "space"},
		},
		"id of 255 bytes": {
			reason:     "255 bytes is the longest id accepted",
			path:       "/v2/service_instances/" + long,
			body:       provisionJSON,
			wantStatus: http.StatusCreated,
			want:       &engine.ProvisionRequest{InstanceID: long, ServiceID: "svc", PlanID: "plan", OrganizationGUID: "org", SpaceGUID: "space"},
		},
		"percent-encoded id": {
			reason:     "ids are decoded from the path",
			path:       "/v2/service_instances/a%20b~c",
			body:       provisionJSON,
			wantStatus: http.StatusCreated,
			want:       &engine.ProvisionRequest{InstanceID: "a b~c", ServiceID: "svc", PlanID: "plan", OrganizationGUID: "org", SpaceGUID: "space"},
		},
		"id of 256 bytes": {
			reason:     "ids are bounded so that names derived from them are",
			path:       "/v2/service_instances/" + long + "x",
			body:       provisionJSON,
			wantStatus: http.StatusBadRequest,
		},
		"control character in id": {
			reason:     "control characters in ids would reach names and logs",
			path:       "/v2/service_instances/a%01b",
			body:       provisionJSON,
			wantStatus: http.StatusBadRequest,
		},
		"invalid UTF-8 in id": {
			reason:     "an id must be text",
			path:       "/v2/service_instances/a%ffb",
			body:       provisionJSON,
			wantStatus: http.StatusBadRequest,
		},
		"accepts_incomplete yes": {
			reason:     "only true and false are booleans",
			path:       "/v2/service_instances/i1?accepts_incomplete=yes",
			body:       provisionJSON,
			wantStatus: http.StatusBadRequest,
		},
		"accepts_incomplete empty": {
			reason:     "present but empty is not absent",
			path:       "/v2/service_instances/i1?accepts_incomplete=",
			body:       provisionJSON,
			wantStatus: http.StatusBadRequest,
		},
		"accepts_incomplete TRUE": {
			reason:     "the spec spells booleans in lower case",
			path:       "/v2/service_instances/i1?accepts_incomplete=TRUE",
			body:       provisionJSON,
			wantStatus: http.StatusBadRequest,
		},
		"accepts_incomplete twice": {
			reason:     "two values are ambiguous",
			path:       "/v2/service_instances/i1?accepts_incomplete=true&accepts_incomplete=false",
			body:       provisionJSON,
			wantStatus: http.StatusBadRequest,
		},
		"malformed query": {
			reason:     "a broken query string must not silently lose accepts_incomplete",
			path:       "/v2/service_instances/i1?accepts_incomplete=tr%zue",
			body:       provisionJSON,
			wantStatus: http.StatusBadRequest,
		},
		"empty body": {
			reason:     "provision needs a body",
			path:       "/v2/service_instances/i1",
			wantStatus: http.StatusBadRequest,
		},
		"malformed JSON": {
			reason:     "a syntax error is a 400",
			path:       "/v2/service_instances/i1",
			body:       `{"service_id":"svc",`,
			wantStatus: http.StatusBadRequest,
		},
		"trailing garbage": {
			reason:     "one JSON value, nothing after it",
			path:       "/v2/service_instances/i1",
			body:       provisionJSON + `x`,
			wantStatus: http.StatusBadRequest,
		},
		"body is an array": {
			reason:     "the body must be an object",
			path:       "/v2/service_instances/i1",
			body:       `[]`,
			wantStatus: http.StatusBadRequest,
		},
		"body is null": {
			reason:     "null carries no required field",
			path:       "/v2/service_instances/i1",
			body:       `null`,
			wantStatus: http.StatusBadRequest,
		},
		"service_id a number": {
			reason:     "wrong field types are a 400",
			path:       "/v2/service_instances/i1",
			body:       `{"service_id":1,"plan_id":"plan","organization_guid":"org","space_guid":"space"}`,
			wantStatus: http.StatusBadRequest,
		},
		"missing service_id": {
			reason:     "service_id is required",
			path:       "/v2/service_instances/i1",
			body:       `{"plan_id":"plan","organization_guid":"org","space_guid":"space"}`,
			wantStatus: http.StatusBadRequest,
		},
		"missing plan_id": {
			reason:     "plan_id is required",
			path:       "/v2/service_instances/i1",
			body:       `{"service_id":"svc","organization_guid":"org","space_guid":"space"}`,
			wantStatus: http.StatusBadRequest,
		},
		"missing organization_guid": {
			reason:     "organization_guid is required",
			path:       "/v2/service_instances/i1",
			body:       `{"service_id":"svc","plan_id":"plan","space_guid":"space"}`,
			wantStatus: http.StatusBadRequest,
		},
		"empty space_guid": {
			reason:     "an empty string counts as missing",
			path:       "/v2/service_instances/i1",
			body:       `{"service_id":"svc","plan_id":"plan","organization_guid":"org","space_guid":""}`,
			wantStatus: http.StatusBadRequest,
		},
		"null plan_id": {
			reason:     "null counts as missing",
			path:       "/v2/service_instances/i1",
			body:       `{"service_id":"svc","plan_id":null,"organization_guid":"org","space_guid":"space"}`,
			wantStatus: http.StatusBadRequest,
		},
		"parameters an array": {
			reason:     "parameters must be an object",
			path:       "/v2/service_instances/i1",
			body:       `{"service_id":"svc","plan_id":"plan","organization_guid":"org","space_guid":"space","parameters":[1]}`,
			wantStatus: http.StatusBadRequest,
		},
		"parameters a string": {
			reason:     "parameters must be an object",
			path:       "/v2/service_instances/i1",
			body:       `{"service_id":"svc","plan_id":"plan","organization_guid":"org","space_guid":"space","parameters":"{}"}`,
			wantStatus: http.StatusBadRequest,
		},
		"context a number": {
			reason:     "context must be an object",
			path:       "/v2/service_instances/i1",
			body:       `{"service_id":"svc","plan_id":"plan","organization_guid":"org","space_guid":"space","context":7}`,
			wantStatus: http.StatusBadRequest,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got captured[engine.ProvisionRequest]
			f := &fakeEngine{provision: func(r engine.ProvisionRequest) (engine.Result, error) {
				got.set(r)
				return engine.Result{Outcome: engine.OutcomeCreated}, nil
			}}
			res := newBroker(t, f).do(t, request{method: http.MethodPut, path: tc.path, body: tc.body, header: tc.header})
			if res.status != tc.wantStatus {
				t.Fatalf("status = %d (%s), want %d: %s", res.status, res.body, tc.wantStatus, tc.reason)
			}
			if diff := cmp.Diff(tc.want, got.get()); diff != "" {
				t.Errorf("engine request (-want +got):\n%s\nreason: %s", diff, tc.reason)
			}
			if tc.wantStatus == http.StatusBadRequest {
				if e := res.errorBody(t); e.Description == "" || e.Error != "" {
					t.Errorf("error body = %+v, want a description and no OSB code", e)
				}
			}
		})
	}
}

func TestBadRequestDescriptionsDoNotEchoValues(t *testing.T) {
	const secret = "hunter2-do-not-echo"
	cases := map[string]struct {
		reason string
		body   string
		want   string // a fragment the description must contain
	}{
		"wrong type": {
			reason: "the field is named, its value is not",
			body:   `{"service_id":{"password":"` + secret + `"},"plan_id":"plan","organization_guid":"org","space_guid":"space"}`,
			want:   `"service_id" must be a string`,
		},
		"syntax error": {
			reason: "the offset is given, the text around it is not",
			body:   `{"service_id":"` + secret + `" "plan_id"}`,
			want:   "not valid JSON",
		},
		"parameters not an object": {
			reason: "the field is named, its value is not",
			body:   `{"service_id":"svc","plan_id":"plan","organization_guid":"org","space_guid":"space","parameters":"` + secret + `"}`,
			want:   `"parameters" must be a JSON object`,
		},
		"missing fields": {
			reason: "all missing fields are listed at once",
			body:   `{"parameters":{"key":"` + secret + `"}}`,
			want:   "service_id, plan_id, organization_guid, space_guid",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := newBroker(t, &fakeEngine{})
			res := b.do(t, request{method: http.MethodPut, path: "/v2/service_instances/i1", body: tc.body})
			if res.status != http.StatusBadRequest {
				t.Fatalf("status = %d, want 400: %s", res.status, tc.reason)
			}
			d := res.errorBody(t).Description
			if strings.Contains(d, secret) || !strings.Contains(d, tc.want) {
				t.Errorf("description = %q, want it to contain %q and not the value: %s", d, tc.want, tc.reason)
			}
			if strings.Contains(b.logs.String(), secret) {
				t.Errorf("log contains a body value: %s", b.logs.String())
			}
		})
	}
}

func TestUpdateRequests(t *testing.T) {
	cases := map[string]struct {
		reason     string
		path       string
		body       string
		wantStatus int
		want       *engine.UpdateRequest
	}{
		"service_id only": {
			reason:     "plan_id is optional; empty means keep the plan",
			path:       "/v2/service_instances/i1",
			body:       updateJSON,
			wantStatus: http.StatusOK,
			want:       &engine.UpdateRequest{InstanceID: "i1", ServiceID: "svc"},
		},
		"plan change with parameters, async": {
			reason:     "every field passes through",
			path:       "/v2/service_instances/i1?accepts_incomplete=true",
			body:       `{"service_id":"svc","plan_id":"big","parameters":{"a":1},"context":{"platform":"cloudfoundry"},"previous_values":{"plan_id":"plan"}}`,
			wantStatus: http.StatusOK,
			want: &engine.UpdateRequest{
				InstanceID: "i1", ServiceID: "svc", PlanID: "big",
				Parameters: json.RawMessage(`{"a":1}`), Context: json.RawMessage(`{"platform":"cloudfoundry"}`),
				AcceptsIncomplete: true,
			},
		},
		"empty maintenance_info": {
			reason:     "clients generated from the spec's OpenAPI document send {} on every PATCH: the same as absent",
			path:       "/v2/service_instances/i1",
			body:       `{"service_id":"svc","maintenance_info":{}}`,
			wantStatus: http.StatusOK,
			want:       &engine.UpdateRequest{InstanceID: "i1", ServiceID: "svc"},
		},
		"maintenance_info with a version": {
			reason:     "maintenance_info.version becomes MaintenanceVersion",
			path:       "/v2/service_instances/i1",
			body:       `{"service_id":"svc","maintenance_info":{"version":"2.0.0"}}`,
			wantStatus: http.StatusOK,
			want:       &engine.UpdateRequest{InstanceID: "i1", ServiceID: "svc", MaintenanceVersion: "2.0.0"},
		},
		"missing service_id": {
			reason:     "service_id is required on update",
			path:       "/v2/service_instances/i1",
			body:       `{"plan_id":"big"}`,
			wantStatus: http.StatusBadRequest,
		},
		"plan_id a number": {
			reason:     "wrong field types are a 400",
			path:       "/v2/service_instances/i1",
			body:       `{"service_id":"svc","plan_id":2}`,
			wantStatus: http.StatusBadRequest,
		},
		"parameters an array": {
			reason:     "parameters must be an object",
			path:       "/v2/service_instances/i1",
			body:       `{"service_id":"svc","parameters":[]}`,
			wantStatus: http.StatusBadRequest,
		},
		"malformed JSON": {
			reason:     "a syntax error is a 400",
			path:       "/v2/service_instances/i1",
			body:       `{`,
			wantStatus: http.StatusBadRequest,
		},
		"bad accepts_incomplete": {
			reason:     "only true and false",
			path:       "/v2/service_instances/i1?accepts_incomplete=1",
			body:       updateJSON,
			wantStatus: http.StatusBadRequest,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got captured[engine.UpdateRequest]
			f := &fakeEngine{update: func(r engine.UpdateRequest) (engine.Result, error) {
				got.set(r)
				return engine.Result{Outcome: engine.OutcomeOK}, nil
			}}
			res := newBroker(t, f).do(t, request{method: http.MethodPatch, path: tc.path, body: tc.body})
			if res.status != tc.wantStatus {
				t.Fatalf("status = %d (%s), want %d: %s", res.status, res.body, tc.wantStatus, tc.reason)
			}
			if diff := cmp.Diff(tc.want, got.get()); diff != "" {
				t.Errorf("engine request (-want +got):\n%s\nreason: %s", diff, tc.reason)
			}
		})
	}
}

func TestDeprovisionRequests(t *testing.T) {
	cases := map[string]struct {
		reason     string
		path       string
		wantStatus int
		want       *engine.DeprovisionRequest
	}{
		"sync": {
			reason:     "service_id and plan_id come from the query",
			path:       "/v2/service_instances/i1?service_id=svc&plan_id=plan",
			wantStatus: http.StatusOK,
			want:       &engine.DeprovisionRequest{InstanceID: "i1", ServiceID: "svc", PlanID: "plan", Identity: "cloudfoundry e30="},
		},
		"async": {
			reason:     "accepts_incomplete=true is passed on",
			path:       "/v2/service_instances/i1?service_id=svc&plan_id=plan&accepts_incomplete=true",
			wantStatus: http.StatusOK,
			want:       &engine.DeprovisionRequest{InstanceID: "i1", ServiceID: "svc", PlanID: "plan", AcceptsIncomplete: true, Identity: "cloudfoundry e30="},
		},
		"missing plan_id": {
			reason:     "plan_id is required on delete",
			path:       "/v2/service_instances/i1?service_id=svc",
			wantStatus: http.StatusBadRequest,
		},
		"empty service_id": {
			reason:     "an empty value counts as missing",
			path:       "/v2/service_instances/i1?service_id=&plan_id=plan",
			wantStatus: http.StatusBadRequest,
		},
		"bad accepts_incomplete": {
			reason:     "only true and false",
			path:       "/v2/service_instances/i1?service_id=svc&plan_id=plan&accepts_incomplete=maybe",
			wantStatus: http.StatusBadRequest,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got captured[engine.DeprovisionRequest]
			f := &fakeEngine{deprovision: func(r engine.DeprovisionRequest) (engine.Result, error) {
				got.set(r)
				return engine.Result{Outcome: engine.OutcomeOK}, nil
			}}
			res := newBroker(t, f).do(t, request{
				method: http.MethodDelete, path: tc.path,
				header: map[string]string{headerOriginatingIdentity: "cloudfoundry e30="},
			})
			if res.status != tc.wantStatus {
				t.Fatalf("status = %d (%s), want %d: %s", res.status, res.body, tc.wantStatus, tc.reason)
			}
			if diff := cmp.Diff(tc.want, got.get()); diff != "" {
				t.Errorf("engine request (-want +got):\n%s\nreason: %s", diff, tc.reason)
			}
		})
	}
}

func TestBindRequests(t *testing.T) {
	cases := map[string]struct {
		reason     string
		path       string
		body       string
		wantStatus int
		want       *engine.BindRequest
	}{
		"minimal": {
			reason:     "service_id and plan_id are enough",
			path:       "/v2/service_instances/i1/service_bindings/b1",
			body:       bindJSON,
			wantStatus: http.StatusCreated,
			want:       &engine.BindRequest{InstanceID: "i1", BindingID: "b1", ServiceID: "svc", PlanID: "plan"},
		},
		"everything": {
			reason: "every field passes through",
			path:   "/v2/service_instances/i1/service_bindings/b1?accepts_incomplete=true",
			body: `{"service_id":"svc","plan_id":"plan","app_guid":"app","bind_resource":{"app_guid":"app"},` +
				`"parameters":{"access":"read"},"context":{"platform":"cloudfoundry"}}`,
			wantStatus: http.StatusCreated,
			want: &engine.BindRequest{
				InstanceID: "i1", BindingID: "b1", ServiceID: "svc", PlanID: "plan", AppGUID: "app",
				BindResource: json.RawMessage(`{"app_guid":"app"}`),
				Parameters:   json.RawMessage(`{"access":"read"}`),
				Context:      json.RawMessage(`{"platform":"cloudfoundry"}`),

				AcceptsIncomplete: true,
			},
		},
		"missing plan_id": {
			reason:     "plan_id is required on bind",
			path:       "/v2/service_instances/i1/service_bindings/b1",
			body:       `{"service_id":"svc"}`,
			wantStatus: http.StatusBadRequest,
		},
		"empty service_id": {
			reason:     "an empty string counts as missing",
			path:       "/v2/service_instances/i1/service_bindings/b1",
			body:       `{"service_id":"","plan_id":"plan"}`,
			wantStatus: http.StatusBadRequest,
		},
		"parameters a number": {
			reason:     "parameters must be an object",
			path:       "/v2/service_instances/i1/service_bindings/b1",
			body:       `{"service_id":"svc","plan_id":"plan","parameters":1}`,
			wantStatus: http.StatusBadRequest,
		},
		"bind_resource an array": {
			reason:     "bind_resource must be an object",
			path:       "/v2/service_instances/i1/service_bindings/b1",
			body:       `{"service_id":"svc","plan_id":"plan","bind_resource":[]}`,
			wantStatus: http.StatusBadRequest,
		},
		"app_guid a bool": {
			reason:     "wrong field types are a 400",
			path:       "/v2/service_instances/i1/service_bindings/b1",
			body:       `{"service_id":"svc","plan_id":"plan","app_guid":true}`,
			wantStatus: http.StatusBadRequest,
		},
		"control character in binding id": {
			reason:     "binding ids are checked like instance ids",
			path:       "/v2/service_instances/i1/service_bindings/b%0A1",
			body:       bindJSON,
			wantStatus: http.StatusBadRequest,
		},
		"malformed JSON": {
			reason:     "a syntax error is a 400",
			path:       "/v2/service_instances/i1/service_bindings/b1",
			body:       `{"service_id"`,
			wantStatus: http.StatusBadRequest,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got captured[engine.BindRequest]
			f := &fakeEngine{bind: func(r engine.BindRequest) (engine.BindResult, error) {
				got.set(r)
				return engine.BindResult{Result: engine.Result{Outcome: engine.OutcomeCreated}, Credentials: &engine.Credentials{}}, nil
			}}
			res := newBroker(t, f).do(t, request{method: http.MethodPut, path: tc.path, body: tc.body})
			if res.status != tc.wantStatus {
				t.Fatalf("status = %d (%s), want %d: %s", res.status, res.body, tc.wantStatus, tc.reason)
			}
			if diff := cmp.Diff(tc.want, got.get()); diff != "" {
				t.Errorf("engine request (-want +got):\n%s\nreason: %s", diff, tc.reason)
			}
		})
	}
}

func TestUnbindRequests(t *testing.T) {
	cases := map[string]struct {
		reason     string
		path       string
		wantStatus int
		want       *engine.UnbindRequest
	}{
		"sync": {
			reason:     "service_id and plan_id come from the query",
			path:       "/v2/service_instances/i1/service_bindings/b1?service_id=svc&plan_id=plan",
			wantStatus: http.StatusOK,
			want:       &engine.UnbindRequest{InstanceID: "i1", BindingID: "b1", ServiceID: "svc", PlanID: "plan"},
		},
		"async": {
			reason:     "accepts_incomplete=true is passed on",
			path:       "/v2/service_instances/i1/service_bindings/b1?service_id=svc&plan_id=plan&accepts_incomplete=true",
			wantStatus: http.StatusOK,
			want:       &engine.UnbindRequest{InstanceID: "i1", BindingID: "b1", ServiceID: "svc", PlanID: "plan", AcceptsIncomplete: true},
		},
		"missing service_id": {
			reason:     "service_id is required on unbind",
			path:       "/v2/service_instances/i1/service_bindings/b1?plan_id=plan",
			wantStatus: http.StatusBadRequest,
		},
		"missing both": {
			reason:     "both are required",
			path:       "/v2/service_instances/i1/service_bindings/b1",
			wantStatus: http.StatusBadRequest,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got captured[engine.UnbindRequest]
			f := &fakeEngine{unbind: func(r engine.UnbindRequest) (engine.Result, error) {
				got.set(r)
				return engine.Result{Outcome: engine.OutcomeOK}, nil
			}}
			res := newBroker(t, f).do(t, request{method: http.MethodDelete, path: tc.path})
			if res.status != tc.wantStatus {
				t.Fatalf("status = %d (%s), want %d: %s", res.status, res.body, tc.wantStatus, tc.reason)
			}
			if diff := cmp.Diff(tc.want, got.get()); diff != "" {
				t.Errorf("engine request (-want +got):\n%s\nreason: %s", diff, tc.reason)
			}
		})
	}
}

func TestLastOperationRequests(t *testing.T) {
	type poll struct{ instanceID, bindingID, operation string }
	cases := map[string]struct {
		reason string
		path   string
		want   poll
	}{
		"instance with operation": {
			reason: "the operation query parameter is passed on, decoded",
			path:   "/v2/service_instances/i1/last_operation?operation=op%2F1&service_id=svc&plan_id=plan",
			want:   poll{instanceID: "i1", operation: "op/1"},
		},
		"instance without operation": {
			reason: "operation is optional",
			path:   "/v2/service_instances/i1/last_operation",
			want:   poll{instanceID: "i1"},
		},
		"binding with operation": {
			reason: "both ids and the operation are passed on",
			path:   "/v2/service_instances/i1/service_bindings/b1/last_operation?operation=op2",
			want:   poll{instanceID: "i1", bindingID: "b1", operation: "op2"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var got captured[poll]
			f := &fakeEngine{
				instanceLastOperation: func(instanceID, operation string) (engine.LastOperation, error) {
					got.set(poll{instanceID: instanceID, operation: operation})
					return engine.LastOperation{State: engine.OpInProgress}, nil
				},
				bindingLastOperation: func(instanceID, bindingID, operation string) (engine.LastOperation, error) {
					got.set(poll{instanceID: instanceID, bindingID: bindingID, operation: operation})
					return engine.LastOperation{State: engine.OpInProgress}, nil
				},
			}
			res := newBroker(t, f).do(t, request{method: http.MethodGet, path: tc.path})
			if res.status != http.StatusOK {
				t.Fatalf("status = %d (%s), want 200: %s", res.status, res.body, tc.reason)
			}
			if diff := cmp.Diff(&tc.want, got.get(), cmp.AllowUnexported(poll{})); diff != "" {
				t.Errorf("engine poll (-want +got):\n%s\nreason: %s", diff, tc.reason)
			}
		})
	}
}

func TestBodyLimit(t *testing.T) {
	const limit = 256
	pad := func(n int) string {
		// A valid provision body of exactly n bytes.
		base := `{"service_id":"svc","plan_id":"plan","organization_guid":"org","space_guid":"space","parameters":{"p":""}}`
		return strings.Replace(base, `"p":""`, `"p":"`+strings.Repeat("x", n-len(base))+`"`, 1)
	}
	cases := map[string]struct {
		reason     string
		method     string
		path       string
		body       string
		wantStatus int
		wantCalls  []string
	}{
		"provision at the limit": {
			reason:     "a body of exactly MaxBodyBytes is read",
			method:     http.MethodPut,
			path:       "/v2/service_instances/i1",
			body:       pad(limit),
			wantStatus: http.StatusCreated,
			wantCalls:  []string{"Provision"},
		},
		"provision one byte over": {
			reason:     "a longer body is refused before the engine sees it",
			method:     http.MethodPut,
			path:       "/v2/service_instances/i1",
			body:       pad(limit + 1),
			wantStatus: http.StatusRequestEntityTooLarge,
		},
		"update far over": {
			reason:     "the limit holds for update",
			method:     http.MethodPatch,
			path:       "/v2/service_instances/i1",
			body:       `{"service_id":"svc","parameters":{"p":"` + strings.Repeat("x", 10*limit) + `"}}`,
			wantStatus: http.StatusRequestEntityTooLarge,
		},
		"bind over": {
			reason:     "the limit holds for bind",
			method:     http.MethodPut,
			path:       "/v2/service_instances/i1/service_bindings/b1",
			body:       `{"service_id":"svc","plan_id":"plan","parameters":{"p":"` + strings.Repeat("x", limit) + `"}}`,
			wantStatus: http.StatusRequestEntityTooLarge,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := succeed(engine.OutcomeCreated, "")
			b := newBroker(t, f, func(o *Options) { o.MaxBodyBytes = limit })
			res := b.do(t, request{method: tc.method, path: tc.path, body: tc.body})
			if res.status != tc.wantStatus {
				t.Fatalf("status = %d (%s), want %d: %s", res.status, res.body, tc.wantStatus, tc.reason)
			}
			if diff := cmp.Diff(tc.wantCalls, f.called()); diff != "" {
				t.Errorf("engine calls (-want +got):\n%s\nreason: %s", diff, tc.reason)
			}
			if tc.wantStatus == http.StatusRequestEntityTooLarge && res.errorBody(t).Description == "" {
				t.Errorf("413 without a description")
			}
		})
	}
}
