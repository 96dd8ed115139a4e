package engine

import (
	"bytes"
	"encoding/json"
	"testing"
)

// canonicalCases pin the canonical form of parameter objects: records hold
// it, and fingerprints hash it, so a change to any of these bytes would make
// a duplicate of an existing record look like a different request.
var canonicalCases = []struct {
	reason, raw, want, err string
}{
	{reason: "an empty object is none", raw: `{}`},
	{reason: "white space is not significant", raw: ` { } `},
	{reason: "null is none", raw: `null`},
	{reason: "only objects", raw: `[]`, err: "want a JSON object"},
	{reason: "compact already", raw: `{"a":1}`, want: `{"a":1}`},
	{reason: "keys sorted", raw: `{"b":1,"a":2}`, want: `{"a":2,"b":1}`},
	{reason: "sorted at every level, numbers as written, no white space",
		raw:  `{ "b" : [1, 2.5e-3, -0, true, false, null] , "a" : {"d":{},"c":[]} }`,
		want: `{"a":{"c":[],"d":{}},"b":[1,2.5e-3,-0,true,false,null]}`},
	{reason: "the last of duplicate keys", raw: `{"a":1,"a":2}`, want: `{"a":2}`},
	{reason: "HTML characters escaped", raw: `{"a":"<tag>"}`, want: `{"a":"\u003ctag\u003e"}`},
	{reason: "escapes of printable characters undone", raw: `{"a":"\u00e9"}`, want: `{"a":"é"}`},
	{reason: "UTF-8 kept", raw: `{"a":"é"}`, want: `{"a":"é"}`},
	{reason: "a quote stays escaped", raw: `{"a":"x\"y"}`, want: `{"a":"x\"y"}`},
	{reason: "DEL kept", raw: "{\"a\":\"\x7f\"}", want: "{\"a\":\"\x7f\"}"},
	{reason: "line separator escaped", raw: "{\"a\":\"\u2028\"}", want: `{"a":"\u2028"}`},
	{reason: "a leading zero", raw: `{"a":01}`, err: "not valid JSON: invalid character '1' after object key:value pair"},
	{reason: "a bare decimal point", raw: `{"a":1.}`, err: "not valid JSON: invalid character '}' after decimal point in numeric literal"},
	{reason: "a bare minus", raw: `{"a":-}`, err: "not valid JSON: invalid character '}' in numeric literal"},
	{reason: "an empty exponent", raw: `{"a":1e}`, err: "not valid JSON: invalid character '}' in exponent of numeric literal"},
	{reason: "a stray closing bracket after the object is not seen (the door never sends one)", raw: `{"a":1}}`, want: `{"a":1}`},
	{reason: "trailing data", raw: `{"a":1} x`, err: "trailing data after the JSON value"},
	{reason: "a missing colon", raw: `{"a" 1}`, err: "not valid JSON: invalid character '1' after object key"},
	{reason: "a trailing comma", raw: `{"a":1,}`, err: "not valid JSON: invalid character '}' looking for beginning of object key string"},
	{reason: "a lone comma", raw: `{,}`, err: "not valid JSON: invalid character ',' looking for beginning of object key string"},
	{reason: "a trailing comma in an array", raw: `{"a":[1,]}`, err: "not valid JSON: invalid character ']' looking for beginning of value"},
	{reason: "labels", raw: `{"labels":{"team":"a","env":"prod"},"purge_on_delete":true}`,
		want: `{"labels":{"env":"prod","team":"a"},"purge_on_delete":true}`},
	{reason: "nesting kept", raw: `{"z":{"y":{"x":{"w":[[[[{"v":"u"}]]]]}}}}`, want: `{"z":{"y":{"x":{"w":[[[[{"v":"u"}]]]]}}}}`},
	{reason: "keys sorted by their bytes", raw: `{"A":1,"a":2,"_":3," ":4,"~":5}`, want: `{" ":4,"A":1,"_":3,"a":2,"~":5}`},
	{reason: "a number beyond float64 as written", raw: `{"n":123456789012345678901234567890}`, want: `{"n":123456789012345678901234567890}`},
	{reason: "a cut literal", raw: `{"t":tru}`, err: "not valid JSON: invalid character '}' in literal true (expecting 'e')"},
	{reason: "spaces inside strings kept", raw: `{"a":"b c"}`, want: `{"a":"b c"}`},
}

func TestCanonicalObject(t *testing.T) {
	for _, tc := range canonicalCases {
		got, err := canonicalObject(json.RawMessage(tc.raw))
		if string(got) != tc.want || errText(err) != tc.err {
			t.Errorf("canonicalObject(%s) = %s, %v; want %s, %q: %s", tc.raw, got, err, tc.want, tc.err, tc.reason)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// FuzzCanonicalObject checks what makes the canonical form a form: it is
// a fixed point, and it does not depend on white space.
func FuzzCanonicalObject(f *testing.F) {
	for _, tc := range canonicalCases {
		f.Add([]byte(tc.raw))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c, err := canonicalObject(raw)
		if err != nil || c == nil {
			return
		}
		if again, err := canonicalObject(c); err != nil || !bytes.Equal(again, c) {
			t.Fatalf("canonical %q of %q is not canonical: %q, %v", c, raw, again, err)
		}
		var spread bytes.Buffer
		if err := json.Indent(&spread, raw, " ", "\t"); err != nil {
			return // a value canonicalObject read beyond (see the stray bracket case)
		}
		if other, err := canonicalObject(spread.Bytes()); err != nil || !bytes.Equal(other, c) {
			t.Fatalf("canonical of %q indented is %q, %v; of it compact %q", raw, other, err, c)
		}
	})
}

// TestFingerprintStable pins fingerprints: stored records carry them, and a
// re-sent request must hash to what its first sending stored.
func TestFingerprintStable(t *testing.T) {
	for _, tc := range []struct {
		r                  Request
		noInstance, withID string
	}{
		{Request{ServiceID: "s", PlanID: "p"},
			"c09fee64ec8a442d1110edddb59febb49c0fd2878b11eee46fcae0d5529577ec", "079a09825623fbae64d88f11cd0e979850c76e441b699038a6ab4fa8db9bfdd6"},
		{Request{ServiceID: "svc", PlanID: "plan", Parameters: json.RawMessage(`{"labels":{"team":"a"}}`), OrganizationGUID: "org", SpaceGUID: "space"},
			"138c697434477570500e88bf1dac94aaf0671a373715f1760079095c5563c589", "705184f58e69910d0446234b3da68431c2ee04f74a2d925c390d992e7f71ff23"},
		{Request{ServiceID: "svc", PlanID: "plan", AppGUID: "app", BindResource: json.RawMessage(`{"app_guid":"app"}`), Parameters: json.RawMessage(`{"a":"<&>"}`)},
			"d732e1163dc364a943a2aeaf6e470efd13c24116d2873b5b9807cc2fd4316c78", "911814687e8f5e0224fc8fbcc76d0ac40b577074e118f2bf6272c7333b25001e"},
		{Request{ServiceID: "é<", PlanID: "p\"", OrganizationGUID: "o\u2028"},
			"850be0566963320637cb7bdf257a4cc69166e464ea89205ae4d59144a0525573", "5b73c1e97f5b14a618f703b9a01e583e82d321f619bea19554d4aedca28e337f"},
	} {
		if got := fingerprint("", tc.r); got != tc.noInstance {
			t.Errorf("fingerprint of %+v = %s, want %s", tc.r, got, tc.noInstance)
		}
		if got := fingerprint("i1", tc.r); got != tc.withID {
			t.Errorf("fingerprint of instance i1's %+v = %s, want %s", tc.r, got, tc.withID)
		}
	}
}
