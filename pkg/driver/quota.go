package driver

import (
	"fmt"
	"strings"
)

// Quota is the limits of one bucket. A zero field sets no limit.
type Quota struct {
	// MaxSize is the most bytes the bucket's objects may hold together.
	MaxSize int64
	// MaxObjects is the most objects the bucket may hold.
	MaxObjects int64
}

// IsZero reports whether q sets no limit.
func (q Quota) IsZero() bool { return q == Quota{} }

// String spells q for messages: "maxSize 10737418240 bytes, maxObjects
// 1000", or "no limit".
func (q Quota) String() string {
	var parts []string
	if q.MaxSize != 0 {
		parts = append(parts, fmt.Sprintf("maxSize %d bytes", q.MaxSize))
	}
	if q.MaxObjects != 0 {
		parts = append(parts, fmt.Sprintf("maxObjects %d", q.MaxObjects))
	}
	if len(parts) == 0 {
		return "no limit"
	}
	return strings.Join(parts, ", ")
}

// QuotaSupport says which of Quota's limits a backend enforces.
type QuotaSupport struct {
	MaxSize, MaxObjects bool
}

// QuotaEnforcer is implemented by a driver whose backend can limit a
// bucket. It is optional: a driver without it enforces no limit, and its
// EnsureBucket answers ErrInvalid to a BucketSpec with a Quota.
type QuotaEnforcer interface {
	// QuotaSupport reports the limits the backend enforces. It makes no
	// backend call.
	QuotaSupport() QuotaSupport
}

// CheckQuota returns nil when d enforces every limit q sets, and otherwise
// an error wrapping ErrInvalid that names the limits it cannot: the check a
// caller makes before it promises q (a plan at catalog load, a claim
// before anything is created), so that a limit is refused rather than
// ignored.
func CheckQuota(d Driver, q Quota) error {
	if q.MaxSize < 0 || q.MaxObjects < 0 {
		return fmt.Errorf("quota %s: a limit cannot be negative: %w", q, ErrInvalid)
	}
	var s QuotaSupport
	if e, ok := d.(QuotaEnforcer); ok {
		s = e.QuotaSupport()
	}
	var missing []string
	if q.MaxSize != 0 && !s.MaxSize {
		missing = append(missing, "by size (maxSize)")
	}
	if q.MaxObjects != 0 && !s.MaxObjects {
		missing = append(missing, "by object count (maxObjects)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("the storage backend cannot limit a bucket %s: %w", strings.Join(missing, " or "), ErrInvalid)
	}
	return nil
}
