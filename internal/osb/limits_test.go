package osb

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/bucketbroker/bucketbroker/internal/engine"
)

// nested returns a JSON object nested depth levels deep ({"a":{"a":...}}),
// or, with array, an object holding arrays ({"a":[[...]]}).
func nested(depth int, array bool) string {
	if array {
		return `{"a":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`
	}
	return strings.Repeat(`{"a":`, depth-1) + `{}` + strings.Repeat(`}`, depth-1)
}

// TestFreeFormLimits sends every free-form field of every request that has
// one (parameters, context, bind_resource) just within and just beyond the
// engine's depth and size limits. Beyond is a 400 that names the field and
// never reaches the engine, so nothing is stored; within reaches it.
// Without the limits a value near encoding/json's own (10000 levels)
// would be stored and then, a few levels deeper inside its record, never
// read back.
func TestFreeFormLimits(t *testing.T) {
	// big is an object of exactly n bytes.
	big := func(n int) string {
		return `{"p":"` + strings.Repeat("x", n-len(`{"p":""}`)) + `"}`
	}
	type endpoint struct {
		method, path, base string
		fields             []string
	}
	endpoints := []endpoint{
		{http.MethodPut, "/v2/service_instances/i1", `"service_id":"svc","plan_id":"plan","organization_guid":"org","space_guid":"space"`, []string{"parameters", "context"}},
		{http.MethodPatch, "/v2/service_instances/i1", `"service_id":"svc"`, []string{"parameters", "context"}},
		{http.MethodPut, "/v2/service_instances/i1/service_bindings/b1", `"service_id":"svc","plan_id":"plan"`, []string{"parameters", "context", "bind_resource"}},
	}
	values := map[string]struct {
		value string
		ok    bool
	}{
		"depth at the limit":        {nested(engine.MaxFreeFormDepth, false), true},
		"depth one over":            {nested(engine.MaxFreeFormDepth+1, false), false},
		"arrays one over":           {nested(engine.MaxFreeFormDepth+1, true), false},
		"depth near json's limit":   {nested(9990, false), false},
		"brackets in strings":       {`{"a":"` + strings.Repeat("[{", 100) + `"}`, true},
		"size at the limit":         {big(engine.MaxFreeFormBytes), true},
		"size one over":             {big(engine.MaxFreeFormBytes + 1), false},
		"escaped quote then nested": {`{"a\"":` + nested(engine.MaxFreeFormDepth, false) + `}`, false},
	}
	for _, ep := range endpoints {
		for _, f := range ep.fields {
			for vname, v := range values {
				t.Run(fmt.Sprintf("%s %s %s %s", ep.method, ep.path, f, vname), func(t *testing.T) {
					fe := succeed(engine.OutcomeCreated, "")
					b := newBroker(t, fe)
					body := `{` + ep.base + `,"` + f + `":` + v.value + `}`
					res := b.do(t, request{method: ep.method, path: ep.path, body: body})
					if v.ok {
						if res.status >= 400 {
							t.Fatalf("status = %d (%s), want the request through", res.status, res.body)
						}
						return
					}
					if res.status != http.StatusBadRequest {
						t.Fatalf("status = %d (%s), want 400", res.status, res.body)
					}
					if d := res.errorBody(t).Description; !strings.Contains(d, `"`+f+`"`) {
						t.Errorf("description %q does not name the field %q", d, f)
					}
					if calls := fe.called(); len(calls) != 0 {
						t.Errorf("engine called (%v) with a value beyond the limits", calls)
					}
				})
			}
		}
	}
}

// TestStoredStringLimits: the other strings the engine stores, the guids
// and ids of the body and X-Broker-API-Originating-Identity (kept with
// every operation of a record's history), are bounded too, so that no
// request can make a record larger than the store writes (it would answer
// 503 for ever instead of 400).
func TestStoredStringLimits(t *testing.T) {
	long := strings.Repeat("g", 256)
	provision := func(field string) string {
		b := map[string]string{"service_id": "svc", "plan_id": "plan", "organization_guid": "org", "space_guid": "space"}
		b[field] = long
		return fmt.Sprintf(`{"service_id":%q,"plan_id":%q,"organization_guid":%q,"space_guid":%q}`, b["service_id"], b["plan_id"], b["organization_guid"], b["space_guid"])
	}
	cases := map[string]struct {
		method, path, body string
		identity           string
		ok                 bool
	}{
		"organization_guid of 256 bytes": {http.MethodPut, "/v2/service_instances/i1", provision("organization_guid"), "", false},
		"space_guid of 256 bytes":        {http.MethodPut, "/v2/service_instances/i1", provision("space_guid"), "", false},
		"service_id of 256 bytes":        {http.MethodPut, "/v2/service_instances/i1", provision("service_id"), "", false},
		"plan_id of 256 bytes on update": {http.MethodPatch, "/v2/service_instances/i1", `{"service_id":"svc","plan_id":"` + long + `"}`, "", false},
		"app_guid of 256 bytes":          {http.MethodPut, "/v2/service_instances/i1/service_bindings/b1", `{"service_id":"svc","plan_id":"plan","app_guid":"` + long + `"}`, "", false},
		"app_guid of 255 bytes":          {http.MethodPut, "/v2/service_instances/i1/service_bindings/b1", `{"service_id":"svc","plan_id":"plan","app_guid":"` + long[1:] + `"}`, "", true},
		"identity at the limit":          {http.MethodPut, "/v2/service_instances/i1", provisionJSON, "cf " + strings.Repeat("A", maxIdentityBytes-3), true},
		"identity one byte over":         {http.MethodPut, "/v2/service_instances/i1", provisionJSON, "cf " + strings.Repeat("A", maxIdentityBytes-2), false},
		"identity not ASCII":             {http.MethodPut, "/v2/service_instances/i1", provisionJSON, "cf é", false},
		"identity with a tab":            {http.MethodPut, "/v2/service_instances/i1", provisionJSON, "cf\tx", false},
		"identity on deprovision":        {http.MethodDelete, "/v2/service_instances/i1?service_id=svc&plan_id=plan", "", "cf é", false},
		"identity on unbind":             {http.MethodDelete, "/v2/service_instances/i1/service_bindings/b1?service_id=svc&plan_id=plan", "", "cf é", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			fe := succeed(engine.OutcomeCreated, "")
			b := newBroker(t, fe)
			var header map[string]string
			if tc.identity != "" {
				header = map[string]string{headerOriginatingIdentity: tc.identity}
			}
			res := b.do(t, request{method: tc.method, path: tc.path, body: tc.body, header: header})
			if tc.ok != (res.status < 400) {
				t.Fatalf("status = %d (%s), want ok=%v", res.status, res.body, tc.ok)
			}
			if !tc.ok && (res.status != http.StatusBadRequest || len(fe.called()) != 0) {
				t.Errorf("status %d, engine calls %v; want 400 and none", res.status, fe.called())
			}
		})
	}
}
