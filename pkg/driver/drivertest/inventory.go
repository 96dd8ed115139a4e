package drivertest

import (
	"context"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// auditable returns the driver as a driver.Auditable, or skips the test.
func (s *suite) auditable(t *testing.T) driver.Auditable {
	t.Helper()
	a, ok := s.cfg.Driver.(driver.Auditable)
	if !ok {
		t.Skipf("drivertest: %T does not implement driver.Auditable (optional: needed by the leak audit only)", s.cfg.Driver)
	}
	return a
}

func (s *suite) inventory(ctx context.Context, t *testing.T, a driver.Auditable, prefix string) driver.Inventory {
	t.Helper()
	inv, err := a.Inventory(ctx, prefix)
	if err != nil {
		t.Fatalf("Inventory(%q): %v", prefix, err)
	}
	return inv
}

// testInventory checks that Inventory lists the driver's bucket and user
// with their marks and keys, and leaves out a bucket and a user that carry
// no mark. Names double as the listing prefix, so that other tests running
// against the same server stay out of the answer.
func (s *suite) testInventory(t *testing.T) {
	a := s.auditable(t)
	ctx := testContext(t)
	ours, foreign := s.newNames(t), s.newNames(t)
	s.ensureBucket(ctx, t, driver.BucketSpec{Name: ours.bucket, Owner: ours.owner})
	cred := s.ensureCredential(ctx, t, driver.CredentialSpec{UserName: ours.user, Owner: ours.owner, Bucket: ours.bucket, Access: driver.AccessReadOnly})
	s.createRootBucket(ctx, t, foreign.bucket, "theirs.txt", "their data")
	if s.rootIAM != nil {
		s.createRootUser(ctx, t, foreign.user)
	}

	got := s.inventory(ctx, t, a, ours.bucket)
	want := driver.Inventory{
		Buckets: []driver.OwnedBucket{{Name: ours.bucket, Owner: ours.owner}},
		Users:   []driver.OwnedUser{{Name: ours.user, Owner: ours.owner, KeyIDs: []string{cred.AccessKeyID}}},
	}
	if ours.user != ours.bucket {
		t.Fatalf("drivertest: bucket %q and user %q names differ; the check needs one prefix for both", ours.bucket, ours.user)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Inventory(%q): -want +got:\n%s", ours.bucket, diff)
	}
	if p, ok := a.(driver.PagedAuditable); ok {
		var paged driver.Inventory
		err := p.InventoryPages(ctx, ours.bucket, func(inv driver.Inventory) error {
			paged.Buckets = append(paged.Buckets, inv.Buckets...)
			paged.Users = append(paged.Users, inv.Users...)
			return nil
		})
		if err != nil {
			t.Fatalf("InventoryPages(%q): %v", ours.bucket, err)
		}
		if diff := cmp.Diff(want, paged); diff != "" {
			t.Errorf("InventoryPages(%q), its pages together: -want +got:\n%s", ours.bucket, diff)
		}
	}
	if got := s.inventory(ctx, t, a, foreign.bucket); len(got.Buckets)+len(got.Users) != 0 {
		t.Errorf("Inventory(%q) = %+v, want nothing: a bucket and a user without owner mark are not ours", foreign.bucket, got)
	}
	s.wantObject(ctx, t, foreign.bucket, "theirs.txt", "their data")
}

// testDeleteAccessKey checks that DeleteAccessKey deletes one key of a
// user of ours, and refuses a user of another owner.
func (s *suite) testDeleteAccessKey(t *testing.T) {
	a := s.auditable(t)
	if s.rootIAM == nil {
		t.Skip("drivertest: Config.IAMEndpoint is empty: cannot add a key behind the driver's back")
	}
	ctx := testContext(t)
	n := s.newNames(t)
	s.ensureBucket(ctx, t, driver.BucketSpec{Name: n.bucket, Owner: n.owner})
	cred := s.ensureCredential(ctx, t, driver.CredentialSpec{UserName: n.user, Owner: n.owner, Bucket: n.bucket, Access: driver.AccessReadWrite})
	out, err := s.rootIAM.CreateAccessKey(ctx, &iam.CreateAccessKeyInput{UserName: &n.user})
	if err != nil {
		t.Fatalf("root: create a second key for %q: %v", n.user, err)
	}
	extra := aws.ToString(out.AccessKey.AccessKeyId)
	extraClient := s.s3Client(extra, aws.ToString(out.AccessKey.SecretAccessKey))
	s.wantAllowed(ctx, t, "put with the extra key", func() error { return put(ctx, extraClient, n.bucket, "k", "v") })

	other := driver.OwnerMark("binding", "someone-else/"+randomID(t))
	err = a.DeleteAccessKey(ctx, n.user, other, extra)
	wantErrorIs(t, "DeleteAccessKey(user of another owner)", err, driver.ErrOwnedByOther)
	if keys, _ := s.rootUserState(ctx, t, n.user); len(keys) != 2 {
		t.Errorf("after a refused DeleteAccessKey the user has keys %q, want both", keys)
	}

	for i := range 2 {
		if err := a.DeleteAccessKey(ctx, n.user, n.owner, extra); err != nil {
			t.Fatalf("DeleteAccessKey call %d: %v, want nil", i+1, err)
		}
	}
	if keys, _ := s.rootUserState(ctx, t, n.user); !slices.Equal(keys, []string{cred.AccessKeyID}) {
		t.Errorf("after DeleteAccessKey the user has keys %q, want only [%s]", keys, cred.AccessKeyID)
	}
	s.wantDenied(ctx, t, "put with the deleted key", func() error { return put(ctx, extraClient, n.bucket, "k", "v") })
	if err := a.DeleteAccessKey(ctx, s.newNames(t).user, n.owner, extra); err != nil {
		t.Errorf("DeleteAccessKey(missing user): %v, want nil", err)
	}
}
