package driver

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

// Name limits. S3 bucket names are 3-63 characters of [a-z0-9-]; IAM user
// names at most 64 characters of [A-Za-z0-9+=,.@_-].
const (
	maxBucketName = 63
	maxUserName   = 64
	// MaxPrefix is the longest name prefix accepted, so that a readable part
	// of the id and a collision-proof hash always fit.
	MaxPrefix = 16
	hashLen   = 24 // hex digits: 96 bits of sha256
	slugLen   = 16
)

var prefixRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

// ValidatePrefix reports whether prefix can start bucket and user names.
func ValidatePrefix(prefix string) error {
	if len(prefix) == 0 || len(prefix) > MaxPrefix || !prefixRE.MatchString(prefix) {
		return fmt.Errorf("name prefix %q: want 1-%d lowercase letters, digits or inner hyphens: %w", prefix, MaxPrefix, ErrInvalid)
	}
	return nil
}

// BucketName derives the backend bucket name for a resource of the given
// kind (for example "instance" or "claim") and id. The name is a function of
// (prefix, kind, id) alone: a retry after a crash computes the same name, and
// different ids never share one (the hash covers the whole id, the readable
// slug only helps operators). It is always a valid S3 bucket name.
func BucketName(prefix, kind, id string) string {
	return name(prefix, kind, id, maxBucketName)
}

// UserName derives the backend user name for a resource of the given kind
// and id, with the same guarantees as BucketName.
func UserName(prefix, kind, id string) string {
	return name(prefix, kind, id, maxUserName)
}

// OwnerMark derives the owner mark stored on backend resources made for a
// resource of the given kind and id. It is at most 64 characters of
// [a-z0-9:-], safe for tag values and paths.
func OwnerMark(kind, id string) string {
	return markPrefix + slug(kind, 12) + ":" + hash(kind, id, 40)
}

func name(prefix, kind, id string, maxLen int) string {
	s := slug(id, slugLen)
	h := hash(kind, id, hashLen)
	n := prefix + "-"
	if s != "" {
		n += s + "-"
	}
	n += h
	if len(n) > maxLen { // only with an over-long prefix, which ValidatePrefix refuses
		n = n[len(n)-maxLen:]
	}
	return n
}

func hash(kind, id string, n int) string {
	sum := sha256.Sum256([]byte(kind + "\x00" + id))
	return hex.EncodeToString(sum[:])[:n]
}

// slug keeps up to n lowercase letters and digits of s, joining runs of
// anything else into a single hyphen.
func slug(s string, n int) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if b.Len() >= n {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
			continue
		}
		if b.Len() > 0 && !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.Trim(b.String(), "-")
}

// markPrefix starts every owner mark OwnerMark makes.
const markPrefix = "bucketbroker:"

// IsOwnerMark reports whether mark has the form of OwnerMark's marks: it
// starts with bucketbroker's prefix. Auditable.Inventory lists the
// resources whose mark it accepts.
func IsOwnerMark(mark string) bool { return strings.HasPrefix(mark, markPrefix) }

// markRE matches OwnerMark's output: the kind's slug and 40 hex digits.
var markRE = regexp.MustCompile(`^bucketbroker:([a-z0-9-]{0,12}):([0-9a-f]{40})$`)

// MarkHash is the part of an owner mark that tells the ids of one kind
// apart: a mark OwnerMark made is its kind and this. It is a small
// comparable value, for a program that holds many marks (the leak audit).
type MarkHash [20]byte

// ParseOwnerMark returns the kind (lower-cased and cut to 12 characters:
// "instance", "binding") and the hash of a mark OwnerMark made, and false
// for any other string.
func ParseOwnerMark(mark string) (kind string, h MarkHash, ok bool) {
	m := markRE.FindStringSubmatch(mark)
	if m == nil {
		return "", h, false
	}
	if _, err := hex.Decode(h[:], []byte(m[2])); err != nil {
		return "", h, false
	}
	return m[1], h, true
}

// Mark returns the owner mark of kind (as ParseOwnerMark returns it) and
// h: ParseOwnerMark's inverse.
func (h MarkHash) Mark(kind string) string {
	return markPrefix + kind + ":" + hex.EncodeToString(h[:])
}

// Names reports whether name is what BucketName or UserName give, under
// prefix, for the kind and id h was made from: both hash the same kind and
// id, so the name ends with the start of the mark's hash. A resource that
// fails (another prefix, a hand-made name, a copied tag) was not made
// under prefix for that mark's owner.
func (h MarkHash) Names(prefix, name string) bool {
	if !strings.HasPrefix(name, prefix+"-") {
		return false
	}
	rest := name[len(prefix)+1:]
	want := hex.EncodeToString(h[:])[:hashLen]
	if rest == want {
		return true
	}
	s, ok := strings.CutSuffix(rest, "-"+want)
	return ok && len(s) <= slugLen && slugRE.MatchString(s)
}

var slugRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
