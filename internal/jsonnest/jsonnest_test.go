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
		"scalar":          {reason: "a scalar nests nothing", in: `"x"`, want: 0},
		"empty object":    {reason: "an object is one level", in: `{}`, want: 1},
		"mixed":           {reason: "arrays and objects both count", in: `{"a":[1,{"b":[]}]}`, want: 4},
		"siblings":        {reason: "the deepest branch counts, not the sum", in: `[[1],[2],[[3]]]`, want: 3},
		"brackets quoted": {reason: "brackets inside strings do not count", in: `{"a":"[[[{{{"}`, want: 1},
		"escaped quote":   {reason: "an escaped quote does not end the string", in: `{"a":"\"[[[","b":[]}`, want: 2},
		"escaped slash":   {reason: "an escaped backslash before the closing quote ends it", in: `["\\",[[]]]`, want: 3},
		"deep":            {reason: "as deep as the text says", in: strings.Repeat("[", 9999) + strings.Repeat("]", 9999), want: 9999},
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
