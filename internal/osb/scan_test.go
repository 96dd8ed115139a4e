package osb

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// scanSeeds are request bodies for FuzzScanBody: what platforms send, and
// what encoding/json decides differently from a naive decoder (case,
// duplicates, null, escapes, invalid UTF-8, Unicode case folding, bad
// syntax at every position, deep nesting).
var scanSeeds = []string{
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
	// Deep nesting, within and past both decoders' limits.
	`{"parameters":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`,
	`{"x":` + strings.Repeat(`{"a":`, 511) + `1` + strings.Repeat("}", 511) + `}`,
	`{"x":` + strings.Repeat(`{"a":`, 512) + `1` + strings.Repeat("}", 512) + `}`,
	`{"x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
	`{"x":` + strings.Repeat("[", 5) + strings.Repeat("]", 4) + `}`,
}

// FuzzScanBody is the differential test of scanBody against encoding/json,
// for each of the three request bodies: whatever the body, decodeBody's
// result and error must be what encoding/json's Unmarshal (and the error
// mapping of unmarshalBody) give, and where scanBody accepts a body,
// encoding/json must accept it too and decode exactly the same fields
// (free-form values byte for byte). It runs on its seeds in every go test;
// `make fuzz` fuzzes it.
func FuzzScanBody(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		compareDecoders[provisionBody](t, body)
		compareDecoders[updateBody](t, body)
		compareDecoders[bindBody](t, body)
	})
}

func compareDecoders[B any, P bodyPtr[B]](t *testing.T, body []byte) {
	t.Helper()
	var want B
	wantErr := unmarshalBody(body, &want)
	if len(bytes.TrimSpace(body)) == 0 {
		wantErr = badRequest("request body is empty; expected a JSON object")
	}

	var scanned B
	if scanBody(body, P(&scanned)) {
		if wantErr != nil {
			t.Fatalf("%T: scanBody accepted %q, encoding/json did not: %v", scanned, body, wantErr)
		}
		if d := cmp.Diff(want, scanned); d != "" {
			t.Fatalf("%T from %q: scanBody differs from encoding/json (-json +scan):\n%s", scanned, body, d)
		}
	}

	var got B
	err := decodeBody[B, P](httptest.NewRequest("PUT", "/", bytes.NewReader(body)), &got)
	if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
		t.Fatalf("%T from %q: error %v, encoding/json's %v", got, body, err, wantErr)
	}
	if d := cmp.Diff(want, got); err == nil && d != "" {
		t.Fatalf("%T from %q: decodeBody differs from encoding/json (-json +decodeBody):\n%s", got, body, d)
	}
}

// TestScanBodyTakesPlatformBodies checks that the bodies platforms send
// take scanBody's way (encoding/json would give the same answer, so
// nothing else would show that the fast way is no longer taken).
func TestScanBodyTakesPlatformBodies(t *testing.T) {
	for _, body := range scanSeeds[:4] {
		var p provisionBody
		var u updateBody
		var b bindBody
		if !scanBody([]byte(body), &p) || !scanBody([]byte(body), &u) || !scanBody([]byte(body), &b) {
			t.Errorf("scanBody refused %s", body)
		}
	}
	var p provisionBody
	body := []byte(scanSeeds[1])
	if !scanBody(body, &p) || p.MaintenanceInfo == nil || p.MaintenanceInfo.Version != "1.0.0" ||
		string(p.Parameters) != `{"labels":{"team":"a"}}` || p.SpaceGUID != "space" {
		t.Fatalf("scanBody decoded %+v", p)
	}
	// A free-form value cannot be appended to over the rest of the body.
	_ = append(p.Parameters, 'x')
	if !bytes.Equal(body, []byte(scanSeeds[1])) {
		t.Fatal("an append to Parameters wrote into the body")
	}
}

// TestBodySlotsCoverFields checks that every field encoding/json would
// fill has its slot, found by its name in any ASCII case, pointing at that
// field: a field added to a body struct but not to its slot method would
// make scanBody skip it.
func TestBodySlotsCoverFields(t *testing.T) {
	for _, v := range []bodySlots{&provisionBody{}, &updateBody{}, &bindBody{}, &maintenanceInfo{}} {
		rv := reflect.ValueOf(v).Elem()
		for i := range rv.NumField() {
			name, _, _ := strings.Cut(rv.Type().Field(i).Tag.Get("json"), ",")
			for _, key := range []string{name, strings.ToUpper(name)} {
				sl := v.slot([]byte(key))
				var p any
				switch {
				case sl.str != nil:
					p = sl.str
				case sl.raw != nil:
					p = sl.raw
				case sl.mi != nil:
					p = sl.mi
				}
				if p != rv.Field(i).Addr().Interface() {
					t.Errorf("%T: key %q does not lead to field %s", v, key, rv.Type().Field(i).Name)
				}
			}
		}
		if sl := v.slot([]byte("unknown")); sl != (slot{}) {
			t.Errorf("%T: an unknown key has a slot", v)
		}
	}
}

// BenchmarkDecodeBody compares scanBody with encoding/json on a provision
// body as Cloud Foundry sends it.
func BenchmarkDecodeBody(b *testing.B) {
	body := []byte(scanSeeds[1])
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var p provisionBody
			if !scanBody(body, &p) {
				b.Fatal("refused")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var p provisionBody
			if err := json.Unmarshal(body, &p); err != nil {
				b.Fatal(err)
			}
		}
	})
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
