package driver

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// Bucket tag limits every S3 server holds a tag set to: AWS's (at most 50
// tags a bucket, keys of 1-128 and values of 0-256 characters, letters,
// digits, white space and _ . : / = + - @), counted in bytes as versitygw
// counts them, which is the stricter of the two for non-ASCII text.
const (
	// MaxBucketTags is the most tags one bucket may carry, the driver's
	// own marks included.
	MaxBucketTags = 50
	// MaxTagKeyBytes and MaxTagValueBytes bound one tag.
	MaxTagKeyBytes   = 128
	MaxTagValueBytes = 256
)

// tagText is S3's tag character set (AWS's pattern, as versitygw checks it).
var tagText = regexp.MustCompile(`^[\p{L}\p{Z}\p{N}_.:/=+\-@]*$`)

// CheckTags reports whether tags can be put on a bucket beside reserved
// tags of the driver's own (its owner mark): every S3 server accepts them.
// The error names the first offending key in key order, never a value
// (labels may be copied from anywhere), and wraps ErrInvalid.
func CheckTags(tags map[string]string, reserved int) error {
	if n := len(tags) + reserved; n > MaxBucketTags {
		return fmt.Errorf("%d tags: a bucket carries at most %d, %d of them bucketbroker's own: %w", len(tags), MaxBucketTags, reserved, ErrInvalid)
	}
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := tags[k]
		switch {
		case k == "" || len(k) > MaxTagKeyBytes:
			return fmt.Errorf("tag key %q: want 1 to %d bytes: %w", k, MaxTagKeyBytes, ErrInvalid)
		case !utf8.ValidString(k) || !tagText.MatchString(k):
			return fmt.Errorf("tag key %q: only letters, digits, spaces and _ . : / = + - @ are allowed: %w", k, ErrInvalid)
		case strings.HasPrefix(strings.ToLower(k), "aws:"):
			return fmt.Errorf("tag key %q: the aws: prefix is reserved: %w", k, ErrInvalid)
		case len(v) > MaxTagValueBytes:
			return fmt.Errorf("value of tag %q: %d bytes, more than %d: %w", k, len(v), MaxTagValueBytes, ErrInvalid)
		case !utf8.ValidString(v) || !tagText.MatchString(v):
			return fmt.Errorf("value of tag %q: only letters, digits, spaces and _ . : / = + - @ are allowed: %w", k, ErrInvalid)
		}
	}
	return nil
}
