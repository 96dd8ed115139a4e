package osb

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/osbapi"
)

// decodeSeeds are request bodies for the decoding tests: what platforms
// send, and what a naive decoder would decide differently from
// encoding/json (case, duplicates, null, escapes, invalid UTF-8, Unicode
// case folding, bad syntax at every position, deep nesting).
var decodeSeeds = []string{
	provisionJSON,
	`{"service_id":"svc","plan_id":"plan","organization_guid":"org","space_guid":"space","parameters":{"labels":{"team":"a"}},"context":{"platform":"cloudfoundry","organization_guid":"org","space_guid":"space","instance_name":"my-bucket"},"maintenance_info":{"version":"1.0.0"}}`,
	`{"service_id":"svc","plan_id":"plan","bind_resource":{"app_guid":"app"},"context":{"platform":"kubernetes","namespace":"ns"},"parameters":{"access":"read-only"},"app_guid":"app","predecessor_binding_id":"old"}`,
	" \t\r\n{ \"service_id\" : \"svc\" ,\n\"plan_id\":\"plan\" } \n",
	`{}`, ` { } `, `null`, `[]`, `"x"`, `1`, `true`, `{"a":1}x`, `{"a":1}{}`, `{"a":1},`,
	// Case and duplicates.
	`{"SERVICE_ID":"a","Service_Id":"b","plan_ID":"p"}`,
	`{"service_id":"a","service_id":"b"}`,
	`{"service_id":"a","service_id":null}`,
	`{"parameters":{"a":1},"parameters":null}`,
	`{"parameters":null,"parameters":{"a":1}}`,
	`{"parameters":{"a":1},"PARAMETERS":[1]}`,
	`{"maintenance_info":{"version":"1"},"maintenance_info":{"description":"d"}}`,
	`{"maintenance_info":{"version":"1"},"maintenance_info":null,"maintenance_info":{"description":"d"}}`,
	`{"maintenance_info":{"VERSION":"1","Description":"x","other":[1,{}]}}`,
	`{"maintenance_info":{}}`, `{"maintenance_info":null}`,
	// Unicode case folding (U+017F folds to s, U+212A to k) and escaped keys.
	`{"ſervice_id":"a"}`, `{"bind_reſource":{}}`, `{"bind_resource":{},"\u212Aey":1}`,
	`{"service\u005fid":"a"}`, `{"service_id\u0000":"a"}`, `{"\u0073ervice_id":"a","plan_id":"p"}`,
	// String contents.
	`{"service_id":"a\"b"}`, `{"service_id":"a\\b"}`, `{"service_id":"\u00e9\ud83d\ude00"}`,
	`{"service_id":"\ud800"}`, `{"service_id":"\udc00\ud800x"}`, `{"service_id":"é☃😀"}`,
	"{\"service_id\":\"\xff\xfe\"}", "{\"service_id\":\"a\xc3\"}", "{\"service_id\":\"\xed\xa0\x80\"}",
	"{\"parameters\":{\"\xff\":\"\xfe\"}}", "{\"\xff\":1}", "{\"service_id\":\"a\x01b\"}", "{\"service_id\":\"a\x7fb\"}",
	`{"service_id":"\x"}`, `{"service_id":"\u12"}`, `{"service_id":"\u12g4"}`, `{"parameters":{"a":"\/\b\f\n\r\t"}}`,
	// Wrong types, first error wins.
	`{"service_id":1}`, `{"service_id":true}`, `{"service_id":[]}`, `{"service_id":{}}`, `{"service_id":-1.5e3}`,
	`{"plan_id":"p","service_id":{},"space_guid":2}`, `{"maintenance_info":"x"}`, `{"maintenance_info":[]}`,
	`{"maintenance_info":1}`, `{"maintenance_info":true}`, `{"maintenance_info":{"version":1}}`,
	`{"maintenance_info":{"version":"1","description":[]}}`, `{"parameters":"x","service_id":1}`,
	`{"service_id":1,"x":}`,
	// Numbers and literals in skipped and kept values.
	`{"x":-0,"y":0.5,"z":1e10,"w":-1.5E-3,"v":1E+2}`, `{"x":01}`, `{"x":-}`, `{"x":1.}`, `{"x":.5}`, `{"x":1e}`,
	`{"x":+1}`, `{"x":0x1}`, `{"x":Infinity}`, `{"x":NaN}`, `{"x":tru}`, `{"x":nul}`, `{"x":falsey}`, `{"x":True}`,
	`{"parameters":[1,2,[3,{"a":[]}],{}]}`, `{"parameters":{"a":[1,]}}`, `{"parameters":{"a":1,}}`, `{"parameters":{,}}`,
	`{"parameters":{"a" 1}}`, `{"parameters":{1:2}}`, `{"parameters":[1 2]}`, `{"parameters":{"a":1]}`, `{"parameters":[}`,
	`{"parameters":{"a":{"b":{"c":{}}}}}`, `{"context":{"a":"}"},"service_id":"s"}`,
	// Truncation, whitespace JSON does not allow, comments.
	`{"service_id":"a"`, `{"service_id":"a`, `{"service_id":`, `{"service_id"`, `{"service_id`, `{`, `{"a":[`,
	"{\"service_id\":\"a\"}\v", "\u00a0{}", "\ufeff{}", `{"a":1}/**/`, `{/*x*/}`, `{"a":1} // c`,
	// Deep nesting, within and past the limits of free-form values and of
	// encoding/json.
	`{"parameters":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`,
	`{"x":` + strings.Repeat(`{"a":`, 511) + `1` + strings.Repeat("}", 511) + `}`,
	`{"x":` + strings.Repeat(`{"a":`, 512) + `1` + strings.Repeat("}", 512) + `}`,
	`{"x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
	`{"x":` + strings.Repeat("[", 5) + strings.Repeat("]", 4) + `}`,
	// Free-form values at and past their limits, valid or not.
	`{"service_id":"s","plan_id":"p","parameters":` + strings.Repeat(`{"a":`, 31) + `{}` + strings.Repeat("}", 31) + `}`,
	`{"service_id":"s","plan_id":"p","parameters":` + strings.Repeat(`{"a":`, 32) + `{}` + strings.Repeat("}", 32) + `}`,
	`{"service_id":"s","plan_id":"p","context":{"a":"` + strings.Repeat("[{", 40) + `"}}`,
	`{"service_id":"s","plan_id":"p","bind_resource":[` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `]}`,
	`{"service_id":"s","plan_id":"p","parameters":{"a":"\"` + strings.Repeat("[", 40) + `"}}`,
	`{"service_id":"s","plan_id":"p","bind_resource":{"a":[` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `]}}`,
	`{"service_id":"s","plan_id":"p","context":{"a\\\"":` + strings.Repeat(`{"a":`, 32) + `{}` + strings.Repeat("}", 32) + `}}`,
	`{"service_id":"s","plan_id":"p","organization_guid":"o","space_guid":"s","maintenance_info":{"version":" "}}`,
}

var updateGolden = flag.Bool("update", false, "rewrite testdata/decode.golden from the decoders' answers")

// TestDecodeGolden pins what the door makes of each seed body for each
// route that has a body: the engine request it passes on, or the status
// and description it answers. The answers are encoding/json's decisions
// mapped by unmarshalBody; a change to them is a change platforms see.
func TestDecodeGolden(t *testing.T) {
	var out bytes.Buffer
	for i, body := range decodeSeeds {
		for _, route := range decodeRoutes {
			fmt.Fprintf(&out, "%d %s: %s\n", i, route.name, route.decode([]byte(body)))
		}
	}
	const path = "testdata/decode.golden"
	if *updateGolden {
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), out.String()); d != "" {
		t.Errorf("decoding differs from %s (-want +got):\n%s", path, d)
	}
}

// decodeRoutes decode a body as each route with a body does, and render
// the outcome on one line.
var decodeRoutes = []struct {
	name   string
	decode func(body []byte) string
}{
	{"provision", func(b []byte) string { return renderDecoded(decodeProvision(bodyRequest(b))) }},
	{"update", func(b []byte) string { return renderDecoded(decodeUpdate(bodyRequest(b))) }},
	{"bind", func(b []byte) string { return renderDecoded(decodeBind(bodyRequest(b))) }},
}

func bodyRequest(body []byte) *http.Request {
	r := httptest.NewRequest(http.MethodPut, "/", bytes.NewReader(body))
	r.SetPathValue("instance_id", "i1")
	r.SetPathValue("binding_id", "b1")
	return r
}

// renderDecoded renders an engine request field by field (byte slices as
// quoted strings), or the door's answer to err.
func renderDecoded(v any, err error) string {
	if err != nil {
		var re *requestError
		if !errors.As(err, &re) {
			return "unexpected error " + err.Error()
		}
		return fmt.Sprintf("%d %q", re.status, re.description)
	}
	rv := reflect.ValueOf(v)
	var b strings.Builder
	for i := range rv.NumField() {
		f := rv.Field(i)
		if f.IsZero() {
			continue
		}
		fmt.Fprintf(&b, " %s=", rv.Type().Field(i).Name)
		if raw, ok := f.Interface().(json.RawMessage); ok {
			fmt.Fprintf(&b, "%q", raw)
		} else {
			fmt.Fprintf(&b, "%#v", f.Interface())
		}
	}
	return "ok" + b.String()
}

// FuzzDecodeBody decodes arbitrary bodies as each route with a body does.
// Whatever the body, the door either refuses it with a 400 (a 413 is the
// size limit's, which this test does not reach) or passes on a request
// whose required fields are there and whose free-form fields are JSON
// objects within the engine's limits. It runs on its seeds in every go
// test; `make fuzz` fuzzes it.
func FuzzDecodeBody(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		check := func(route string, err error, required []field, objects map[string]json.RawMessage) {
			t.Helper()
			if err != nil {
				var re *requestError
				if !errors.As(err, &re) || re.status != http.StatusBadRequest {
					t.Fatalf("%s of %q: %v, want a 400", route, body, err)
				}
				return
			}
			for _, f := range required {
				if strings.TrimSpace(f.value) == "" {
					t.Fatalf("%s of %q: passed on without %s", route, body, f.name)
				}
			}
			for name, raw := range objects {
				if raw == nil {
					continue
				}
				if !json.Valid(raw) || raw[0] != '{' {
					t.Fatalf("%s of %q: %s %q is not an object", route, body, name, raw)
				}
				if err := engine.CheckFreeForm(name, raw); err != nil {
					t.Fatalf("%s of %q: %v", route, body, err)
				}
			}
		}
		p, err := decodeProvision(bodyRequest(body))
		check("provision", err, []field{{"service_id", p.ServiceID}, {"plan_id", p.PlanID}, {"organization_guid", p.OrganizationGUID}, {"space_guid", p.SpaceGUID}},
			map[string]json.RawMessage{"parameters": p.Parameters, "context": p.Context})
		u, err := decodeUpdate(bodyRequest(body))
		check("update", err, []field{{"service_id", u.ServiceID}}, map[string]json.RawMessage{"parameters": u.Parameters, "context": u.Context})
		b, err := decodeBind(bodyRequest(body))
		check("bind", err, []field{{"service_id", b.ServiceID}, {"plan_id", b.PlanID}},
			map[string]json.RawMessage{"parameters": b.Parameters, "context": b.Context, "bind_resource": b.BindResource})
	})
}

// BenchmarkDecodeBody decodes a provision body as Cloud Foundry sends it.
func BenchmarkDecodeBody(b *testing.B) {
	body := []byte(decodeSeeds[1])
	b.ReportAllocs()
	for b.Loop() {
		var p osbapi.ProvisionRequest
		if err := unmarshalBody(body, &p); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBodyQueryMatchesAsyncQuery checks bodyQuery's shortcuts against the
// parsed query they stand for.
func TestBodyQueryMatchesAsyncQuery(t *testing.T) {
	for _, q := range []string{"", "accepts_incomplete=true", "accepts_incomplete=false", "accepts_incomplete=True",
		"accepts_incomplete=true&accepts_incomplete=true", "accepts_incomplete=tr%75e", "accepts_incomplete", "x=1", "%zz", "accepts_incomplete=true;"} {
		r := httptest.NewRequest("PUT", "/", nil)
		r.URL.RawQuery = q
		_, want, wantErr := asyncQuery(r)
		got, err := bodyQuery(r)
		if got != want || fmt.Sprint(err) != fmt.Sprint(wantErr) {
			t.Errorf("query %q: bodyQuery %v, %v; asyncQuery %v, %v", q, got, err, want, wantErr)
		}
	}
}
