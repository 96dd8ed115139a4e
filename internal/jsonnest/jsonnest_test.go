package jsonnest

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDepth(t *testing.T) {
	cases := map[string]struct {
		reason string
		in     string
		want   int
	}{
		"scalar":           {reason: "a scalar nests nothing", in: `"x"`, want: 0},
		"empty object":     {reason: "an object is one level", in: `{}`, want: 1},
		"mixed":            {reason: "arrays and objects both count", in: `{"a":[1,{"b":[]}]}`, want: 4},
		"siblings":         {reason: "the deepest branch counts, not the sum", in: `[[1],[2],[[3]]]`, want: 3},
		"brackets quoted":  {reason: "brackets inside strings do not count", in: `{"a":"[[[{{{"}`, want: 1},
		"escaped quote":    {reason: "an escaped quote does not end the string", in: `{"a":"\"[[[","b":[]}`, want: 2},
		"escaped slash":    {reason: "an escaped backslash before the closing quote ends it", in: `["\\",[[]]]`, want: 3},
		"deep":             {reason: "as deep as the text says", in: strings.Repeat("[", 9999) + strings.Repeat("]", 9999), want: 9999},
		"deeper than json": {reason: "deeper than encoding/json decodes", in: `{"a":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`, want: 10002},
		"big number":       {reason: "a number beyond float64 is no error", in: `[[1e400]]`, want: 2},
		"invalid":          {reason: "the nesting before the first error", in: `[[[1]],[[2 3]]]`, want: 3},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := Depth([]byte(tc.in)); got != tc.want {
				t.Errorf("Depth(%.40s) = %d, want %d: %s", tc.in, got, tc.want, tc.reason)
			}
		})
	}
}

func TestPrune(t *testing.T) {
	cases := map[string]struct {
		reason     string
		in         string
		max        int
		want       string
		wantPruned int
	}{
		"within": {reason: "a text within the bound is unchanged", in: `{"a":[1,{"b":2}]}`, max: 3, want: `{"a":[1,{"b":2}]}`},
		"one branch": {reason: "only the value that opens too deep becomes null", in: `{"a":[1,{"b":[2]}],"c":3}`, max: 2,
			want: `{"a":[1,null],"c":3}`, wantPruned: 1},
		"two branches": {reason: "each value opening too deep counts once", in: `[[[1]],[[2],3]]`, max: 2,
			want: `[[null],[null,3]]`, wantPruned: 2},
		"quoted brackets": {reason: "brackets inside strings neither open nor close", in: `{"a":"]]]","b":{"c":"[[["}}`, max: 1,
			want: `{"a":"]]]","b":null}`, wantPruned: 1},
		"number forms": {reason: "what is kept, is kept byte for byte", in: "{ \"a\" : [ 1.50E+3 , \"\\u00e9\" ], \"b\":[[0]] }", max: 2,
			want: "{ \"a\" : [ 1.50E+3 , \"\\u00e9\" ], \"b\":[null] }", wantPruned: 1},
		"deep": {reason: "a text nested as deep as encoding/json refuses comes back readable",
			in: `{"x":` + strings.Repeat(`{"a":`, 9999) + `{}` + strings.Repeat(`}`, 9999) + `,"y":1}`, max: 3,
			want: `{"x":{"a":{"a":null}},"y":1}`, wantPruned: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, n := Prune([]byte(tc.in), tc.max)
			if string(got) != tc.want || n != tc.wantPruned {
				t.Errorf("Prune(%.40s, %d) = %s, %d; want %s, %d: %s", tc.in, tc.max, got, n, tc.want, tc.wantPruned, tc.reason)
			}
			if !json.Valid(got) || Depth(got) > tc.max {
				t.Errorf("Prune(%.40s, %d) = %.60s: not valid JSON within %d levels", tc.in, tc.max, got, tc.max)
			}
		})
	}
}

func TestExceeds(t *testing.T) {
	cases := map[string]struct {
		reason string
		in     string
		limit  int
		want   int
		over   bool
	}{
		"few brackets":     {reason: "no more brackets than the limit: within", in: `{"a":[1,{"b":2}]}`, limit: 3},
		"at the limit":     {reason: "as deep as the limit is within", in: `{"a":[1,{"b":[2]}],"c":{}}`, limit: 4},
		"over":             {reason: "one level more is over", in: `{"a":[1,{"b":[[2]]}]}`, limit: 4, want: 5, over: true},
		"quoted brackets":  {reason: "brackets in strings count for nothing", in: `{"a":"[[[[[[{{{{{{","b":[]}`, limit: 2},
		"escaped quote":    {reason: "an escaped quote does not end the string", in: `{"a\"[[[[":{"b":"\"{{{{"}}`, limit: 2},
		"siblings":         {reason: "many brackets side by side are not deep", in: `[[],[],[],[],[],[]]`, limit: 2},
		"deep in siblings": {reason: "the deepest branch decides", in: `[[],[],[[[]]],[]]`, limit: 3, want: 4, over: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, over := Exceeds([]byte(tc.in), tc.limit)
			if got != tc.want || over != tc.over {
				t.Errorf("Exceeds(%s, %d) = %d, %v; want %d, %v: %s", tc.in, tc.limit, got, over, tc.want, tc.over, tc.reason)
			}
		})
	}
}
