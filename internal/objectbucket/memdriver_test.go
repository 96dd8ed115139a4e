package objectbucket

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// memDriver is an in-memory driver.Driver that answers at once, for
// BenchmarkClaimLifecycleInstantDriver: it keeps the driver contract's
// ownership rules (owner marks, adopting only unmarked buckets and users
// when asked, ErrOwnedByOther for another owner's bucket or user, or an
// unmarked one without AdoptUnmarked, exactly one live key
// per user, missing things deleted as success) so that the controller takes
// the same paths as with a real backend, with none of a backend's cost.
// Buckets hold no objects, so purge has nothing to empty. Safe for
// concurrent use.
type memDriver struct {
	mu      sync.Mutex
	buckets map[string]*memBucket
	users   map[string]*memUser
}

type memBucket struct {
	owner      string
	tags       map[string]string
	versioning bool
}

type memUser struct {
	owner  string
	bucket string
	access driver.Access
	keys   map[string]string // access key id -> secret
}

func newMemDriver() *memDriver {
	return &memDriver{buckets: map[string]*memBucket{}, users: map[string]*memUser{}}
}

var _ driver.Driver = (*memDriver)(nil)

// size is how many buckets and users exist.
func (d *memDriver) size() (buckets, users int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.buckets), len(d.users)
}

func (d *memDriver) EnsureBucket(ctx context.Context, spec driver.BucketSpec) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if spec.Name == "" || spec.Owner == "" {
		return fmt.Errorf("bucket %q owner %q: %w", spec.Name, spec.Owner, driver.ErrInvalid)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	bk, ok := d.buckets[spec.Name]
	switch {
	case !ok:
		bk = &memBucket{owner: spec.Owner}
		d.buckets[spec.Name] = bk
	case bk.owner == spec.Owner:
	case bk.owner == "" && spec.AdoptUnmarked:
		bk.owner = spec.Owner
	default:
		return fmt.Errorf("bucket %s: %w", spec.Name, driver.ErrOwnedByOther)
	}
	bk.tags = maps.Clone(spec.Tags)
	if spec.Versioning {
		bk.versioning = true
	}
	return nil
}

func (d *memDriver) DeleteBucket(ctx context.Context, name, owner string, purge bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	bk, ok := d.buckets[name]
	if !ok {
		return nil
	}
	if bk.owner == "" || bk.owner != owner {
		return fmt.Errorf("bucket %s: %w", name, driver.ErrOwnedByOther)
	}
	delete(d.buckets, name) // empty: there is never anything to purge
	return nil
}

func (d *memDriver) EnsureCredential(ctx context.Context, spec driver.CredentialSpec) (driver.Credential, error) {
	if err := ctx.Err(); err != nil {
		return driver.Credential{}, err
	}
	if spec.UserName == "" || spec.Owner == "" || spec.Bucket == "" || !spec.Access.Valid() {
		return driver.Credential{}, fmt.Errorf("credential %q for bucket %q: %w", spec.UserName, spec.Bucket, driver.ErrInvalid)
	}
	if spec.Keys != driver.ReplaceKeys { // the reconciler, its only caller, replaces keys
		return driver.Credential{}, fmt.Errorf("key mode %d: %w", spec.Keys, driver.ErrInvalid)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	u, ok := d.users[spec.UserName]
	switch {
	case !ok:
		u = &memUser{owner: spec.Owner, keys: map[string]string{}}
		d.users[spec.UserName] = u
	case u.owner == spec.Owner:
	case u.owner == "" && spec.AdoptUnmarked:
		u.owner = spec.Owner // then as the caller's own: other keys deleted below
	default:
		return driver.Credential{}, fmt.Errorf("user %s: %w", spec.UserName, driver.ErrOwnedByOther)
	}
	u.bucket, u.access = spec.Bucket, spec.Access
	if spec.KeyID != "" {
		if _, live := u.keys[spec.KeyID]; live {
			for id := range u.keys {
				if id != spec.KeyID {
					delete(u.keys, id)
				}
			}
			return driver.Credential{AccessKeyID: spec.KeyID}, nil
		}
	}
	clear(u.keys)
	id, secret := "AKIA"+rand.Text(), rand.Text()+rand.Text()
	u.keys[id] = secret
	return driver.Credential{AccessKeyID: id, SecretAccessKey: secret}, nil
}

func (d *memDriver) RevokeCredential(ctx context.Context, userName, owner string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	u, ok := d.users[userName]
	if !ok {
		return nil
	}
	if u.owner != owner {
		return fmt.Errorf("user %s: %w", userName, driver.ErrOwnedByOther)
	}
	delete(d.users, userName)
	return nil
}

func (d *memDriver) Observe(ctx context.Context, req driver.ObserveRequest) (driver.Observation, error) {
	if err := ctx.Err(); err != nil {
		return driver.Observation{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var o driver.Observation
	if bk, ok := d.buckets[req.Bucket]; ok && req.Bucket != "" {
		o.BucketExists, o.BucketOwner = true, bk.owner
	}
	if u, ok := d.users[req.UserName]; ok && req.UserName != "" {
		o.UserExists, o.UserOwner = true, u.owner
		o.KeyIDs = slices.Sorted(maps.Keys(u.keys))
	}
	return o, nil
}

// TestMemDriver holds the benchmark's instant driver to the ownership rules
// of the driver contract, so that the benchmark measures the same paths.
func TestMemDriver(t *testing.T) {
	ctx := t.Context()
	d := newMemDriver()
	if err := d.EnsureBucket(ctx, driver.BucketSpec{Name: "b", Owner: "o1"}); err != nil {
		t.Fatal(err)
	}
	if err := d.EnsureBucket(ctx, driver.BucketSpec{Name: "b", Owner: "o1"}); err != nil {
		t.Fatalf("EnsureBucket again: %v", err)
	}
	if err := d.EnsureBucket(ctx, driver.BucketSpec{Name: "b", Owner: "o2", AdoptUnmarked: true}); !errors.Is(err, driver.ErrOwnedByOther) {
		t.Fatalf("EnsureBucket of another owner's bucket: %v, want ErrOwnedByOther", err)
	}
	if err := d.DeleteBucket(ctx, "b", "o2", true); !errors.Is(err, driver.ErrOwnedByOther) {
		t.Fatalf("DeleteBucket by another owner: %v, want ErrOwnedByOther", err)
	}
	d.buckets["unmarked"] = &memBucket{}
	if err := d.EnsureBucket(ctx, driver.BucketSpec{Name: "unmarked", Owner: "o1"}); !errors.Is(err, driver.ErrOwnedByOther) {
		t.Fatalf("EnsureBucket of an unmarked bucket: %v, want ErrOwnedByOther", err)
	}
	if err := d.EnsureBucket(ctx, driver.BucketSpec{Name: "unmarked", Owner: "o1", AdoptUnmarked: true}); err != nil {
		t.Fatalf("adopt: %v", err)
	}

	spec := driver.CredentialSpec{UserName: "u", Owner: "o1", Bucket: "b", Access: driver.AccessReadWrite}
	c1, err := d.EnsureCredential(ctx, spec)
	if err != nil || c1.AccessKeyID == "" || c1.SecretAccessKey == "" {
		t.Fatalf("EnsureCredential: %+v, %v", c1, err)
	}
	spec.KeyID = c1.AccessKeyID
	c2, err := d.EnsureCredential(ctx, spec)
	if err != nil || c2.AccessKeyID != c1.AccessKeyID || c2.SecretAccessKey != "" {
		t.Fatalf("EnsureCredential keeping %s: %+v, %v", c1.AccessKeyID, c2, err)
	}
	spec.KeyID = "lost"
	c3, err := d.EnsureCredential(ctx, spec)
	if err != nil || c3.AccessKeyID == c1.AccessKeyID || c3.SecretAccessKey == "" {
		t.Fatalf("EnsureCredential keeping an unknown key: %+v, %v", c3, err)
	}
	o, err := d.Observe(ctx, driver.ObserveRequest{Bucket: "b", UserName: "u"})
	if err != nil || !o.BucketExists || o.BucketOwner != "o1" || !o.UserExists || o.UserOwner != "o1" || !slices.Equal(o.KeyIDs, []string{c3.AccessKeyID}) {
		t.Fatalf("Observe: %+v, %v", o, err)
	}
	if _, err := d.EnsureCredential(ctx, driver.CredentialSpec{UserName: "u", Owner: "o2", Bucket: "b", Access: driver.AccessReadOnly, AdoptUnmarked: true}); !errors.Is(err, driver.ErrOwnedByOther) {
		t.Fatalf("EnsureCredential of another owner's user: %v, want ErrOwnedByOther", err)
	}
	d.users["unmarked"] = &memUser{keys: map[string]string{"AKIASTRAY": "s"}}
	adopt := driver.CredentialSpec{UserName: "unmarked", Owner: "o1", Bucket: "b", Access: driver.AccessReadWrite}
	if _, err := d.EnsureCredential(ctx, adopt); !errors.Is(err, driver.ErrOwnedByOther) {
		t.Fatalf("EnsureCredential of an unmarked user: %v, want ErrOwnedByOther", err)
	}
	adopt.AdoptUnmarked = true
	if c, err := d.EnsureCredential(ctx, adopt); err != nil || c.SecretAccessKey == "" {
		t.Fatalf("adopt user: %+v, %v", c, err)
	}
	if o, _ := d.Observe(ctx, driver.ObserveRequest{UserName: "unmarked"}); o.UserOwner != "o1" || len(o.KeyIDs) != 1 || o.KeyIDs[0] == "AKIASTRAY" {
		t.Fatalf("adopted user: owner %q keys %v, want o1 and one new key", o.UserOwner, o.KeyIDs)
	}
	if err := d.RevokeCredential(ctx, "u", "o2"); !errors.Is(err, driver.ErrOwnedByOther) {
		t.Fatalf("RevokeCredential by another owner: %v, want ErrOwnedByOther", err)
	}
	for range 2 { // the second time, missing is success
		if err := d.RevokeCredential(ctx, "u", "o1"); err != nil {
			t.Fatal(err)
		}
		if err := d.DeleteBucket(ctx, "b", "o1", false); err != nil {
			t.Fatal(err)
		}
	}
	if o, err := d.Observe(ctx, driver.ObserveRequest{Bucket: "b", UserName: "u"}); err != nil || o.BucketExists || o.UserExists {
		t.Fatalf("Observe after deletion: %+v, %v", o, err)
	}
}
