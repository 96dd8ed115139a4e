package engine

import (
	"bytes"
	"encoding/json"
	"testing"
)

// canonicalSeeds are parameter objects of the shapes the plain paths
// handle and of the shapes they must leave to the general path.
var canonicalSeeds = []string{
	`{}`, ` { } `, `null`, `[]`, `{"a":1}`, `{"b":1,"a":2}`, `{ "b" : [1, 2.5e-3, -0, true, false, null] , "a" : {"d":{},"c":[]} }`,
	`{"a":1,"a":2}`, `{"a":"<tag>"}`, `{"a":"\u00e9"}`, `{"a":"é"}`, `{"a":"x\"y"}`, "{\"a\":\"\x7f\"}", "{\"a\":\"\u2028\"}",
	`{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a":1e}`, `{"a":1}}`, `{"a":1} x`, `{"a" 1}`, `{"a":1,}`, `{,}`, `{"a":[1,]}`,
	`{"labels":{"team":"a","env":"prod"},"purge_on_delete":true}`, `{"z":{"y":{"x":{"w":[[[[{"v":"u"}]]]]}}}}`,
	`{"A":1,"a":2,"_":3," ":4,"~":5}`, `{"n":123456789012345678901234567890}`, `{"t":tru}`, `{"a":"b c"}`,
}

// TestCanonicalPlainMatchesDecoded checks the plain path against the
// general one: stored fingerprints depend on every byte of the canonical
// form, so the two must agree wherever the plain path answers.
func TestCanonicalPlainMatchesDecoded(t *testing.T) {
	for _, raw := range canonicalSeeds {
		checkCanonicalPlain(t, []byte(raw))
	}
	if _, ok := canonicalPlainObject([]byte(`{"b":{"d":1,"c":[2,{"f":3,"e":4}]},"a":"x"}`)); !ok {
		t.Errorf("plain path refused a plain object; it would never be taken")
	}
}

func FuzzCanonicalPlain(f *testing.F) {
	for _, raw := range canonicalSeeds {
		f.Add([]byte(raw))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		checkCanonicalPlain(t, raw)
	})
}

func checkCanonicalPlain(t *testing.T, raw []byte) {
	t.Helper()
	got, ok := canonicalPlainObject(raw)
	if !ok {
		return
	}
	want, err := canonicalDecoded(raw)
	if err != nil {
		t.Fatalf("canonical %q: plain path accepted what the general path refuses: %v", raw, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("canonical %q: plain path %q, general path %q", raw, got, want)
	}
}

// TestFingerprintPlainMatchesJSON checks the hand-written fingerprint
// input against encoding/json's.
func TestFingerprintPlainMatchesJSON(t *testing.T) {
	for _, params := range canonicalSeeds {
		for _, s := range []string{"", "guid-1", "a<b", "é", `q"`} {
			checkFingerprintPlain(t, s, s+"x", []byte(params), []byte(params))
		}
	}
	if _, ok := appendFingerprintPlain(nil, "i", Request{ServiceID: "s", PlanID: "p", Parameters: json.RawMessage(`{"a":1}`)}); !ok {
		t.Errorf("plain fingerprint refused a plain request; it would never be taken")
	}
}

func FuzzFingerprintPlain(f *testing.F) {
	f.Add("i", "s", []byte(`{"a":1}`), []byte(`{"b":"c"}`))
	f.Fuzz(func(t *testing.T, id, s string, params, bindResource []byte) {
		checkFingerprintPlain(t, id, s, params, bindResource)
	})
}

func checkFingerprintPlain(t *testing.T, id, s string, params, bindResource []byte) {
	t.Helper()
	// The engine fingerprints canonical objects only.
	p, err := canonicalObject(params)
	if err != nil {
		return
	}
	br, err := canonicalObject(bindResource)
	if err != nil {
		return
	}
	for _, r := range []Request{
		{ServiceID: s, PlanID: s + "p", Parameters: p, OrganizationGUID: s, SpaceGUID: id},
		{ServiceID: s, PlanID: id, Parameters: p, AppGUID: s, BindResource: br},
		{ServiceID: id, PlanID: s},
	} {
		for _, instanceID := range []string{"", id} {
			got, ok := appendFingerprintPlain(nil, instanceID, r)
			if want := fingerprintJSON(instanceID, r); ok && !bytes.Equal(got, want) {
				t.Fatalf("fingerprint of %q %+v: plain %q, encoding/json %q", instanceID, r, got, want)
			}
		}
	}
}
