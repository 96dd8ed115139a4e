package driver

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckTags(t *testing.T) {
	many := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[strings.Repeat("k", i+1)] = "v"
		}
		return m
	}
	cases := map[string]struct {
		reason string
		tags   map[string]string
		ok     bool
	}{
		"plain":                     {"what labels usually are", map[string]string{"team": "data-eng", "cost.center": "42"}, true},
		"empty value":               {"S3 allows an empty value", map[string]string{"flag": ""}, true},
		"letters of any script":     {"S3 allows letters and digits of any script", map[string]string{"name": "Größe über 5 ünd 日本"}, true},
		"all the punctuation":       {"_ . : / = + - @ and space are S3's punctuation", map[string]string{"k": "a_b.c:d/e=f+g-h@i j"}, true},
		"value of 256 bytes":        {"the longest value", map[string]string{"k": strings.Repeat("x", 256)}, true},
		"49 beside one mark":        {"50 in all", many(49), true},
		"snowman":                   {"a symbol is not a letter", map[string]string{"k": "☃"}, false},
		"ampersand":                 {"& is outside S3's set", map[string]string{"k": "a&b"}, false},
		"comma":                     {", is outside S3's set", map[string]string{"k": "a,b"}, false},
		"control character":         {"control characters are outside S3's set", map[string]string{"k": "a\tb"}, false},
		"newline":                   {"control characters are outside S3's set", map[string]string{"k": "a\nb"}, false},
		"invalid UTF-8":             {"a tag is text", map[string]string{"k": "a\xffb"}, false},
		"256 characters, 512 bytes": {"the limit is in bytes on some servers", map[string]string{"k": strings.Repeat("ü", 256)}, false},
		"value of 257 bytes":        {"one byte too long", map[string]string{"k": strings.Repeat("x", 257)}, false},
		"key of 129 bytes":          {"one byte too long", map[string]string{strings.Repeat("k", 129): "v"}, false},
		"empty key":                 {"a key is required", map[string]string{"": "v"}, false},
		"aws prefix":                {"AWS reserves aws:", map[string]string{"aws:x": "v"}, false},
		"50 beside one mark":        {"51 in all", many(50), false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := CheckTags(tc.tags, 1)
			if (err == nil) != tc.ok {
				t.Fatalf("CheckTags = %v, want ok=%v: %s", err, tc.ok, tc.reason)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
		})
	}
}
