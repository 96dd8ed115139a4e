package driver

import (
	"regexp"
	"strings"
	"testing"
)

var (
	bucketRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$`)
	userRE   = regexp.MustCompile(`^[A-Za-z0-9+=,.@_-]{1,64}$`)
)

func TestNamesAreValidAndDistinct(t *testing.T) {
	ids := []string{
		"a", "A", "a-b/c", "a/b-c", "0000", strings.Repeat("x", 5000),
		strings.Repeat("x", 4999) + "y", "ünïcødé-日本語", "../../etc/passwd", "bucket..name",
		"-leading", "trailing-", "with space", "\x00nul", "xn--abc", "192.168.0.1",
		"0b4c6e6a-8f1e-4b7c-9a55-3d2e1f0a9b8c",
	}
	seenB, seenU := map[string]string{}, map[string]string{}
	for _, id := range ids {
		b := BucketName("bb", "instance", id)
		u := UserName("bb", "binding", id)
		if !bucketRE.MatchString(b) {
			t.Errorf("BucketName(%q) = %q: not a valid bucket name", id, b)
		}
		if !userRE.MatchString(u) {
			t.Errorf("UserName(%q) = %q: not a valid user name", id, u)
		}
		if prev, ok := seenB[b]; ok {
			t.Errorf("BucketName collision: %q and %q -> %q", prev, id, b)
		}
		if prev, ok := seenU[u]; ok {
			t.Errorf("UserName collision: %q and %q -> %q", prev, id, u)
		}
		seenB[b], seenU[u] = id, id
		if again := BucketName("bb", "instance", id); again != b {
			t.Errorf("BucketName(%q) not deterministic: %q then %q", id, b, again)
		}
	}
	if BucketName("bb", "instance", "x") == BucketName("bb", "claim", "x") {
		t.Error("kinds must not share names")
	}
}

func TestOwnerMark(t *testing.T) {
	m := OwnerMark("instance", strings.Repeat("z", 1000))
	if len(m) > 64 || !regexp.MustCompile(`^[a-z0-9:-]+$`).MatchString(m) {
		t.Errorf("OwnerMark = %q: want <= 64 chars of [a-z0-9:-]", m)
	}
	if OwnerMark("instance", "a") == OwnerMark("binding", "a") {
		t.Error("owner marks of different kinds must differ")
	}
}

// TestMarkHash: a mark is its kind and its hash, both ways; what
// OwnerMark does not make has no hash.
func TestMarkHash(t *testing.T) {
	for _, kind := range []string{"instance", "binding", "claim"} {
		m := OwnerMark(kind, "0b4c6e6a-8f1e-4b7c")
		k, h, ok := ParseOwnerMark(m)
		if !ok || k != kind || h.Mark(k) != m || !IsOwnerMark(m) {
			t.Errorf("ParseOwnerMark(%q) = %q, %x, %v; its Mark = %q, IsOwnerMark = %v; want %q and the mark back",
				m, k, h, ok, h.Mark(k), IsOwnerMark(m), kind)
		}
	}
	for _, m := range []string{"", "bucketbroker:instance:", "bucketbroker:instance:" + strings.Repeat("g", 40), "other:instance:" + strings.Repeat("a", 40)} {
		if k, h, ok := ParseOwnerMark(m); ok {
			t.Errorf("ParseOwnerMark(%q) = %q, %x, true; want false", m, k, h)
		}
	}
	if IsOwnerMark("other:instance:" + strings.Repeat("a", 40)) {
		t.Errorf("IsOwnerMark of another program's mark = true, want false")
	}
}

func TestValidatePrefix(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		ok     bool
	}{
		{"bb", true}, {"team-a", true}, {"", false}, {"UPPER", false}, {"-x", false},
		{"x-", false}, {strings.Repeat("a", MaxPrefix+1), false}, {"a.b", false},
	} {
		if err := ValidatePrefix(tc.prefix); (err == nil) != tc.ok {
			t.Errorf("ValidatePrefix(%q) = %v, want ok=%v", tc.prefix, err, tc.ok)
		}
	}
}

func TestOwnerMarksAndNames(t *testing.T) {
	inst := OwnerMark("instance", "0b4c6e6a-8f1e-4b7c")
	tests := map[string]struct {
		reason   string
		prefix   string
		name     string
		mark     string
		wantKind string
		wantOK   bool
		match    bool
	}{
		"Bucket": {
			reason: "a bucket name derived with the prefix matches its mark",
			prefix: "bb", name: BucketName("bb", "instance", "0b4c6e6a-8f1e-4b7c"), mark: inst,
			wantKind: "instance", wantOK: true, match: true,
		},
		"User": {
			reason: "a user name derived with the prefix matches its mark",
			prefix: "bb", name: UserName("bb", "binding", "b/1"), mark: OwnerMark("binding", "b/1"),
			wantKind: "binding", wantOK: true, match: true,
		},
		"EmptySlug": {
			reason: "an id without letters or digits gives a name without slug that still matches",
			prefix: "bb", name: BucketName("bb", "instance", "//"), mark: OwnerMark("instance", "//"),
			wantKind: "instance", wantOK: true, match: true,
		},
		"OtherPrefix": {
			reason: "a name made under another prefix is not judged under this one",
			prefix: "bb", name: BucketName("team", "instance", "0b4c6e6a-8f1e-4b7c"), mark: inst,
			wantKind: "instance", wantOK: true,
		},
		"OtherID": {
			reason: "a mark copied onto another id's resource does not match its name",
			prefix: "bb", name: BucketName("bb", "instance", "other"), mark: inst,
			wantKind: "instance", wantOK: true,
		},
		"NotAMark": {
			reason: "a tag value that OwnerMark cannot make is no mark",
			prefix: "bb", name: BucketName("bb", "instance", "x"), mark: "bucketbroker:instance:xyz",
		},
		"ForeignMark": {
			reason: "anyone else's owner tag is no mark",
			prefix: "bb", name: "bb-x", mark: "team-a",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			kind, h, ok := ParseOwnerMark(tc.mark)
			if kind != tc.wantKind || ok != tc.wantOK {
				t.Errorf("%s\nParseOwnerMark(%q) = %q, %v; want %q, %v", tc.reason, tc.mark, kind, ok, tc.wantKind, tc.wantOK)
			}
			if got := ok && h.Names(tc.prefix, tc.name); got != tc.match {
				t.Errorf("%s\nParseOwnerMark(%q) names %q under %q = %v, want %v", tc.reason, tc.mark, tc.name, tc.prefix, got, tc.match)
			}
		})
	}
}
