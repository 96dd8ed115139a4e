package drivertest

import (
	"strings"
	"testing"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// testQuota checks BucketSpec.Quota against what the driver says it
// enforces (driver.QuotaEnforcer). A size limit must refuse an object
// larger than it at once, follow a changed limit, and go when the spec
// sets none. A limit the driver does not enforce must be refused
// (driver.ErrInvalid), by CheckQuota and by EnsureBucket alike, never
// ignored.
func (s *suite) testQuota(t *testing.T) {
	ctx := testContext(t)
	d := s.cfg.Driver
	var support driver.QuotaSupport
	if e, ok := d.(driver.QuotaEnforcer); ok {
		support = e.QuotaSupport()
	}
	n := s.newNames(t)
	s.removeBucketAfter(t, n.bucket)
	spec := driver.BucketSpec{Name: n.bucket, Owner: n.owner}

	if !support.MaxObjects {
		spec.Quota = driver.Quota{MaxObjects: 10}
		wantErrorIs(t, "CheckQuota(maxObjects) on a driver that does not enforce it", driver.CheckQuota(d, spec.Quota), driver.ErrInvalid)
		wantErrorIs(t, "EnsureBucket(maxObjects) on a driver that does not enforce it", d.EnsureBucket(ctx, spec), driver.ErrInvalid)
	}
	const mib = 1 << 20
	spec.Quota = driver.Quota{MaxSize: mib}
	if !support.MaxSize {
		wantErrorIs(t, "CheckQuota(maxSize) on a driver that does not enforce it", driver.CheckQuota(d, spec.Quota), driver.ErrInvalid)
		wantErrorIs(t, "EnsureBucket(maxSize) on a driver that does not enforce it", d.EnsureBucket(ctx, spec), driver.ErrInvalid)
		return
	}
	if err := driver.CheckQuota(d, spec.Quota); err != nil {
		t.Fatalf("CheckQuota(maxSize) on a driver that enforces it: %v", err)
	}
	if err := d.EnsureBucket(ctx, spec); err != nil {
		t.Fatalf("EnsureBucket(maxSize 1 MiB): %v", err)
	}
	big := strings.Repeat("x", 2*mib)
	if err := put(ctx, s.root, n.bucket, "big", big); err == nil {
		t.Fatal("root: put of 2 MiB into a bucket limited to 1 MiB succeeded, want it refused")
	}
	if err := put(ctx, s.root, n.bucket, "small", "fits"); err != nil {
		t.Fatalf("root: put of 4 bytes into a bucket limited to 1 MiB: %v", err)
	}
	// Again, unchanged; then raised: the object that did not fit now does.
	if err := d.EnsureBucket(ctx, spec); err != nil {
		t.Fatalf("second EnsureBucket(maxSize 1 MiB): %v", err)
	}
	spec.Quota.MaxSize = 4 * mib
	if err := d.EnsureBucket(ctx, spec); err != nil {
		t.Fatalf("EnsureBucket(maxSize 4 MiB): %v", err)
	}
	if err := put(ctx, s.root, n.bucket, "big", big); err != nil {
		t.Fatalf("root: put of 2 MiB after the limit was raised to 4 MiB: %v", err)
	}
	// Lowered, then lifted: a spec without a quota leaves none.
	spec.Quota.MaxSize = mib
	if err := d.EnsureBucket(ctx, spec); err != nil {
		t.Fatalf("EnsureBucket(maxSize 1 MiB) again: %v", err)
	}
	if err := put(ctx, s.root, n.bucket, "big2", big); err == nil {
		t.Fatal("root: put of 2 MiB after the limit was lowered to 1 MiB succeeded, want it refused")
	}
	spec.Quota = driver.Quota{}
	if err := d.EnsureBucket(ctx, spec); err != nil {
		t.Fatalf("EnsureBucket without a quota: %v", err)
	}
	if err := put(ctx, s.root, n.bucket, "big2", strings.Repeat("y", 5*mib)); err != nil {
		t.Errorf("root: put of 5 MiB after the limit was lifted: %v", err)
	}
	// The mark is what it was: the quota changed nothing else.
	obs := s.observe(ctx, t, driver.ObserveRequest{Bucket: n.bucket})
	if obs.BucketOwner != n.owner {
		t.Errorf("bucket owner mark after quota changes = %q, want %q", obs.BucketOwner, n.owner)
	}
}
