package minio

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/bucketbroker/bucketbroker/internal/driver/minio/adminapi"
	"github.com/bucketbroker/bucketbroker/internal/driver/minio/miniotest"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
	"github.com/bucketbroker/bucketbroker/pkg/driver/drivertest"
)

// liveConfig is the driver configuration for the MinIO server the
// environment names, as its root user (miniotest.FromEnv: it skips or
// fails the test without one).
func liveConfig(t *testing.T) Config {
	t.Helper()
	srv := miniotest.FromEnv(t)
	return Config{Endpoint: srv.Endpoint, AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey}
}

func newDriver(t *testing.T, cfg Config) *Driver {
	t.Helper()
	d, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return d
}

// TestConformance runs the drivertest suite against MinIO. The suite's
// checks that make a user behind the driver's back need an IAM API, which
// MinIO has not: they skip, and TestForeignUsers does the same through
// MinIO's admin API.
func TestConformance(t *testing.T) {
	cfg := liveConfig(t)
	d := newDriver(t, cfg)
	drivertest.Run(t, drivertest.Config{
		Driver:              d,
		S3Endpoint:          cfg.Endpoint,
		PathStyle:           true,
		RootAccessKeyID:     cfg.AccessKeyID,
		RootSecretAccessKey: cfg.SecretAccessKey,
		Prefix:              "bbminio",
	})
}

func TestNewRefusesIncompleteConfig(t *testing.T) {
	for what, cfg := range map[string]Config{
		"no endpoint":   {AccessKeyID: "a", SecretAccessKey: "b"},
		"no secret":     {Endpoint: "http://127.0.0.1:9000", AccessKeyID: "a"},
		"a path":        {Endpoint: "http://127.0.0.1:9000/x", AccessKeyID: "a", SecretAccessKey: "b"},
		"not http(s)":   {Endpoint: "ftp://127.0.0.1", AccessKeyID: "a", SecretAccessKey: "b"},
		"no access key": {Endpoint: "http://127.0.0.1:9000", SecretAccessKey: "b"},
	} {
		if _, err := New(cfg); !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("New with %s = %v, want ErrInvalid", what, err)
		}
	}
}

func TestObserveRejectsWrongSecret(t *testing.T) {
	cfg := liveConfig(t)
	cfg.SecretAccessKey += "x"
	d := newDriver(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := d.Observe(ctx, driver.ObserveRequest{}); err == nil {
		t.Fatal("Observe(empty) with a wrong secret key = nil, want an error")
	}
}

type testNames struct{ bucket, user, owner string }

func newNames(t *testing.T, kind string) testNames {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	return testNames{
		bucket: driver.BucketName("bbminio", kind, id),
		user:   driver.UserName("bbminio", kind, id),
		owner:  driver.OwnerMark(kind, id),
	}
}

func s3Client(endpoint, access, secret string) *s3.Client {
	return s3.New(s3.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(endpoint),
		UsePathStyle:     true,
		Credentials:      credentials.NewStaticCredentialsProvider(access, secret, ""),
		RetryMaxAttempts: 1,
	})
}

func put(ctx context.Context, c *s3.Client, bucket, key string) error {
	_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: strings.NewReader("v")})
	return err
}

// TestForeignUsers is the suite's checks of users made behind the
// driver's back, made here through MinIO's admin API: a user without our
// policy is refused and untouched (its secret still works), unless
// AdoptUnmarked, which takes it over (its old secret stops); a user whose
// policy of our name carries another mark is refused even so.
func TestForeignUsers(t *testing.T) {
	cfg := liveConfig(t)
	d := newDriver(t, cfg)
	root, err := adminapi.New(adminapi.Config{Endpoint: cfg.Endpoint, AccessKey: cfg.AccessKeyID, SecretKey: cfg.SecretAccessKey})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	n := newNames(t, "foreign")
	if err := d.EnsureBucket(ctx, driver.BucketSpec{Name: n.bucket, Owner: n.owner}); err != nil {
		t.Fatalf("EnsureBucket: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = root.RemoveUser(ctx, n.user)
		_ = root.RemoveCannedPolicy(ctx, policyName(n.user))
		if err := d.DeleteBucket(ctx, n.bucket, n.owner, true); err != nil {
			t.Errorf("cleanup: delete bucket: %v", err)
		}
	})
	// A user someone else made, allowed to write to the bucket by a
	// policy of their own.
	const strayPolicy = "bbminio-stray-policy"
	doc := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:PutObject"],"Resource":["arn:aws:s3:::` + n.bucket + `/*"]}]}`
	if err := root.AddCannedPolicy(ctx, strayPolicy, []byte(doc)); err != nil {
		t.Fatalf("root: add policy: %v", err)
	}
	t.Cleanup(func() { _ = root.RemoveCannedPolicy(context.Background(), strayPolicy) })
	const straySecret = "stray-secret-0123456789"
	if err := root.AddUser(ctx, n.user, straySecret); err != nil {
		t.Fatalf("root: add user: %v", err)
	}
	if _, err := root.AttachPolicy(ctx, n.user, strayPolicy); err != nil {
		t.Fatalf("root: attach policy: %v", err)
	}
	stray := s3Client(cfg.Endpoint, n.user, straySecret)
	if err := put(ctx, stray, n.bucket, "before"); err != nil {
		t.Fatalf("put with the stray user's own key: %v", err)
	}

	spec := driver.CredentialSpec{UserName: n.user, Owner: n.owner, Bucket: n.bucket, Access: driver.AccessReadOnly}
	if _, err := d.EnsureCredential(ctx, spec); !errors.Is(err, driver.ErrOwnedByOther) {
		t.Fatalf("EnsureCredential(unmarked user) = %v, want ErrOwnedByOther", err)
	}
	if err := d.RevokeCredential(ctx, n.user, n.owner); !errors.Is(err, driver.ErrOwnedByOther) {
		t.Fatalf("RevokeCredential(unmarked user) = %v, want ErrOwnedByOther", err)
	}
	info, err := root.UserInfo(ctx, n.user)
	if err != nil || !slices.Equal(info.Policies, []string{strayPolicy}) {
		t.Fatalf("root: after refusals user has policies %q (%v), want [%s] (untouched)", info.Policies, err, strayPolicy)
	}
	if err := put(ctx, stray, n.bucket, "after-refusal"); err != nil {
		t.Errorf("put with the stray user's own key after the refusals: %v, want success (untouched)", err)
	}
	if obs, err := d.Observe(ctx, driver.ObserveRequest{UserName: n.user}); err != nil || !obs.UserExists || obs.UserOwner != "" {
		t.Errorf("Observe = %+v, %v; want an existing user without owner", obs, err)
	}

	if inv, err := d.Inventory(ctx, n.user); err != nil || len(inv.Users) != 0 {
		t.Errorf("Inventory(%q) = users %+v, %v; want none (the user is not ours)", n.user, inv.Users, err)
	}

	// Adopted: marked, its own secret replaced, one key of ours, read-only.
	spec.AdoptUnmarked = true
	cred, err := d.EnsureCredential(ctx, spec)
	if err != nil {
		t.Fatalf("EnsureCredential(unmarked user, AdoptUnmarked): %v", err)
	}
	if cred.NewUser || cred.SecretAccessKey == "" {
		t.Errorf("adoption = NewUser %v, secret set %v; want false, true", cred.NewUser, cred.SecretAccessKey != "")
	}
	if obs, err := d.Observe(ctx, driver.ObserveRequest{UserName: n.user}); err != nil || obs.UserOwner != n.owner || !slices.Equal(obs.KeyIDs, []string{cred.AccessKeyID}) {
		t.Errorf("Observe after adoption = %+v, %v; want owner %q and keys [%s]", obs, err, n.owner, cred.AccessKeyID)
	}
	if inv, err := d.Inventory(ctx, n.user); err != nil || !slices.EqualFunc(inv.Users, []driver.OwnedUser{{Name: n.user, Owner: n.owner, KeyIDs: []string{cred.AccessKeyID}}},
		func(a, b driver.OwnedUser) bool {
			return a.Name == b.Name && a.Owner == b.Owner && slices.Equal(a.KeyIDs, b.KeyIDs)
		}) {
		t.Errorf("Inventory(%q) after adoption = users %+v, %v; want the user with owner %q and key %s", n.user, inv.Users, err, n.owner, cred.AccessKeyID)
	}
	if err := put(ctx, stray, n.bucket, "after-adoption"); err == nil {
		t.Error("put with the stray user's old secret after adoption succeeded, want refused")
	}
	mine := s3Client(cfg.Endpoint, cred.AccessKeyID, cred.SecretAccessKey)
	if _, err := mine.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &n.bucket}); err != nil {
		t.Errorf("list with the adopted user's key: %v", err)
	}
	if err := put(ctx, mine, n.bucket, "read-only"); err == nil {
		t.Error("put with the adopted user's read-only key succeeded, want refused")
	}

	// Another owner's user, whatever AdoptUnmarked says.
	other := spec
	other.Owner = driver.OwnerMark("foreign", "someone-else")
	for _, adopt := range []bool{false, true} {
		other.AdoptUnmarked = adopt
		if _, err := d.EnsureCredential(ctx, other); !errors.Is(err, driver.ErrOwnedByOther) {
			t.Errorf("EnsureCredential(another owner's user, AdoptUnmarked %v) = %v, want ErrOwnedByOther", adopt, err)
		}
	}
	if err := d.RevokeCredential(ctx, n.user, other.Owner); !errors.Is(err, driver.ErrOwnedByOther) {
		t.Errorf("RevokeCredential(another owner's user) = %v, want ErrOwnedByOther", err)
	}
	if _, err := mine.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &n.bucket}); err != nil {
		t.Errorf("list with our key after another owner's refused calls: %v", err)
	}

	if err := d.RevokeCredential(ctx, n.user, n.owner); err != nil {
		t.Fatalf("RevokeCredential: %v", err)
	}
	if _, err := root.CannedPolicy(ctx, policyName(n.user)); !errors.Is(err, adminapi.ErrNoSuchPolicy) {
		t.Errorf("root: policy after revoke: %v, want ErrNoSuchPolicy", err)
	}
	if _, err := mine.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &n.bucket}); err == nil {
		t.Error("list with the revoked key succeeded, want refused")
	}
}

// TestNoSelfServiceKeys: a key the driver hands out cannot mint another
// key (a service account) nor set its user's secret, which MinIO allows a
// user whose policy does not deny it.
func TestNoSelfServiceKeys(t *testing.T) {
	cfg := liveConfig(t)
	d := newDriver(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	n := newNames(t, "self")
	if err := d.EnsureBucket(ctx, driver.BucketSpec{Name: n.bucket, Owner: n.owner}); err != nil {
		t.Fatalf("EnsureBucket: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := d.RevokeCredential(ctx, n.user, n.owner); err != nil {
			t.Errorf("cleanup: revoke: %v", err)
		}
		if err := d.DeleteBucket(ctx, n.bucket, n.owner, true); err != nil {
			t.Errorf("cleanup: delete bucket: %v", err)
		}
	})
	cred, err := d.EnsureCredential(ctx, driver.CredentialSpec{UserName: n.user, Owner: n.owner, Bucket: n.bucket, Access: driver.AccessReadWrite})
	if err != nil {
		t.Fatalf("EnsureCredential: %v", err)
	}
	self, err := adminapi.New(adminapi.Config{Endpoint: cfg.Endpoint, AccessKey: cred.AccessKeyID, SecretKey: cred.SecretAccessKey})
	if err != nil {
		t.Fatal(err)
	}
	if sa, err := self.AddServiceAccount(ctx, n.user); err == nil {
		t.Errorf("the handed-out key minted service account %s, want refused", sa.AccessKey)
	}
	if err := self.AddUser(ctx, n.user, "chosen-secret-0123456789"); err == nil {
		t.Error("the handed-out key set its user's secret, want refused")
	}
	if obs, err := d.Observe(ctx, driver.ObserveRequest{UserName: n.user}); err != nil || !slices.Equal(obs.KeyIDs, []string{cred.AccessKeyID}) {
		t.Errorf("Observe = %+v, %v; want keys [%s] only", obs, err, cred.AccessKeyID)
	}
}

// TestVersionedBucketsAtOnce: buckets with versioning made at the same
// time by a new driver (whose first creates read their tags back, and may
// write them) all end up marked and versioned. MinIO loses one of a
// bucket's tags and its versioning when both are written at once.
func TestVersionedBucketsAtOnce(t *testing.T) {
	cfg := liveConfig(t)
	d := newDriver(t, cfg)
	root := s3Client(cfg.Endpoint, cfg.AccessKeyID, cfg.SecretAccessKey)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for range 12 {
		n := newNames(t, "versioned")
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := d.DeleteBucket(ctx, n.bucket, n.owner, true); err != nil {
				t.Errorf("cleanup: delete bucket %q: %v", n.bucket, err)
			}
		})
		wg.Go(func() {
			if err := d.EnsureBucket(ctx, driver.BucketSpec{Name: n.bucket, Owner: n.owner, Versioning: true}); err != nil {
				t.Errorf("EnsureBucket(%q, Versioning): %v", n.bucket, err)
				return
			}
			v, err := root.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: &n.bucket})
			switch {
			case err != nil:
				t.Errorf("root: versioning of %q: %v", n.bucket, err)
			case v.Status != s3types.BucketVersioningStatusEnabled:
				t.Errorf("root: versioning of %q = %q, want Enabled", n.bucket, v.Status)
			}
			if obs, err := d.Observe(ctx, driver.ObserveRequest{Bucket: n.bucket}); err != nil || obs.BucketOwner != n.owner {
				t.Errorf("Observe(%q) = owner %q, %v; want %q", n.bucket, obs.BucketOwner, err, n.owner)
			}
		})
	}
	wg.Wait()
}

// TestDeleteAccessKey is the suite's DeleteAccessKey check, which needs an
// IAM API to add a key behind the driver's back: here the second key is
// the driver's own (AddKey). It deletes one key of a user of ours, refuses
// a user of another owner, and leaves a key of another user alone.
func TestDeleteAccessKey(t *testing.T) {
	cfg := liveConfig(t)
	d := newDriver(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	n, other := newNames(t, "delkey"), newNames(t, "delkey")
	if err := d.EnsureBucket(ctx, driver.BucketSpec{Name: n.bucket, Owner: n.owner}); err != nil {
		t.Fatalf("EnsureBucket: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, u := range []testNames{n, other} {
			if err := d.RevokeCredential(ctx, u.user, u.owner); err != nil {
				t.Errorf("cleanup: revoke %q: %v", u.user, err)
			}
		}
		if err := d.DeleteBucket(ctx, n.bucket, n.owner, true); err != nil {
			t.Errorf("cleanup: delete bucket: %v", err)
		}
	})
	spec := driver.CredentialSpec{UserName: n.user, Owner: n.owner, Bucket: n.bucket, Access: driver.AccessReadWrite}
	first, err := d.EnsureCredential(ctx, spec)
	if err != nil {
		t.Fatalf("EnsureCredential: %v", err)
	}
	spec.Keys = driver.AddKey
	second, err := d.EnsureCredential(ctx, spec)
	if err != nil {
		t.Fatalf("EnsureCredential(AddKey): %v", err)
	}
	theirs, err := d.EnsureCredential(ctx, driver.CredentialSpec{UserName: other.user, Owner: other.owner, Bucket: n.bucket, Access: driver.AccessReadOnly})
	if err != nil {
		t.Fatalf("EnsureCredential(other user): %v", err)
	}

	if err := d.DeleteAccessKey(ctx, n.user, other.owner, second.AccessKeyID); !errors.Is(err, driver.ErrOwnedByOther) {
		t.Errorf("DeleteAccessKey(user of another owner) = %v, want ErrOwnedByOther", err)
	}
	if err := d.DeleteAccessKey(ctx, n.user, n.owner, theirs.AccessKeyID); err != nil {
		t.Errorf("DeleteAccessKey(a key of another user) = %v, want nil (not the user's key)", err)
	}
	for i := range 2 {
		if err := d.DeleteAccessKey(ctx, n.user, n.owner, second.AccessKeyID); err != nil {
			t.Fatalf("DeleteAccessKey call %d: %v", i+1, err)
		}
	}
	if obs, err := d.Observe(ctx, driver.ObserveRequest{UserName: n.user}); err != nil || !slices.Equal(obs.KeyIDs, []string{first.AccessKeyID}) {
		t.Errorf("Observe(%q) = keys %q, %v; want [%s]", n.user, obs.KeyIDs, err, first.AccessKeyID)
	}
	if obs, err := d.Observe(ctx, driver.ObserveRequest{UserName: other.user}); err != nil || !slices.Equal(obs.KeyIDs, []string{theirs.AccessKeyID}) {
		t.Errorf("Observe(%q) = keys %q, %v; want [%s] (untouched)", other.user, obs.KeyIDs, err, theirs.AccessKeyID)
	}
	if err := put(ctx, s3Client(cfg.Endpoint, second.AccessKeyID, second.SecretAccessKey), n.bucket, "k"); err == nil {
		t.Error("put with the deleted key succeeded, want refused")
	}
}

// TestPolicyFollowsAccess: the policy MinIO gives back (re-encoded,
// reordered) reads as the one written, so a repeated call writes nothing;
// a call with another access rewrites it, and the key held keeps working
// with the new scope at once.
func TestPolicyFollowsAccess(t *testing.T) {
	cfg := liveConfig(t)
	d := newDriver(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	n := newNames(t, "access")
	if err := d.EnsureBucket(ctx, driver.BucketSpec{Name: n.bucket, Owner: n.owner}); err != nil {
		t.Fatalf("EnsureBucket: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := d.RevokeCredential(ctx, n.user, n.owner); err != nil {
			t.Errorf("cleanup: revoke: %v", err)
		}
		if err := d.DeleteBucket(ctx, n.bucket, n.owner, true); err != nil {
			t.Errorf("cleanup: delete bucket: %v", err)
		}
	})
	spec := driver.CredentialSpec{UserName: n.user, Owner: n.owner, Bucket: n.bucket, Access: driver.AccessReadWrite}
	cred, err := d.EnsureCredential(ctx, spec)
	if err != nil {
		t.Fatalf("EnsureCredential: %v", err)
	}
	got, err := d.admin.CannedPolicy(ctx, policyName(n.user))
	if err != nil {
		t.Fatalf("read the policy back: %v", err)
	}
	want, err := policyDocument(n.bucket, driver.AccessReadWrite, n.owner)
	if err != nil {
		t.Fatal(err)
	}
	if !samePolicy(got, want) {
		t.Errorf("samePolicy(as MinIO returns it, as written) = false, want true:\n%s\n%s", got, want)
	}
	if policyMark(got) != n.owner {
		t.Errorf("policyMark(as MinIO returns it) = %q, want %q", policyMark(got), n.owner)
	}
	ro, err := policyDocument(n.bucket, driver.AccessReadOnly, n.owner)
	if err != nil {
		t.Fatal(err)
	}
	if samePolicy(got, ro) {
		t.Error("samePolicy(read-write, read-only) = true, want false")
	}

	c := s3Client(cfg.Endpoint, cred.AccessKeyID, cred.SecretAccessKey)
	if err := put(ctx, c, n.bucket, "rw"); err != nil {
		t.Fatalf("put with the read-write key: %v", err)
	}
	spec.Access, spec.KeyID = driver.AccessReadOnly, cred.AccessKeyID
	if again, err := d.EnsureCredential(ctx, spec); err != nil || again != (driver.Credential{AccessKeyID: cred.AccessKeyID}) {
		t.Fatalf("EnsureCredential(read-only, KeyID) = %q (secret set %v), %v; want the same key", again.AccessKeyID, again.SecretAccessKey != "", err)
	}
	if err := put(ctx, c, n.bucket, "ro"); err == nil {
		t.Error("put with the key after its binding became read-only succeeded, want refused")
	}
	if _, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &n.bucket}); err != nil {
		t.Errorf("list with the read-only key: %v", err)
	}
}

// TestDisabledUserEnabledAgain: a user of ours that an operator disabled
// is enabled again by the next EnsureCredential, in each key mode, so
// that the key the call leaves works; another owner's disabled user stays
// as it is.
func TestDisabledUserEnabledAgain(t *testing.T) {
	cfg := liveConfig(t)
	d := newDriver(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	n := newNames(t, "off")
	if err := d.EnsureBucket(ctx, driver.BucketSpec{Name: n.bucket, Owner: n.owner}); err != nil {
		t.Fatalf("EnsureBucket: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := d.RevokeCredential(ctx, n.user, n.owner); err != nil {
			t.Errorf("cleanup: revoke: %v", err)
		}
		if err := d.DeleteBucket(ctx, n.bucket, n.owner, true); err != nil {
			t.Errorf("cleanup: delete bucket: %v", err)
		}
	})
	spec := driver.CredentialSpec{UserName: n.user, Owner: n.owner, Bucket: n.bucket, Access: driver.AccessReadWrite, Keys: driver.AddKey}
	cred, err := d.EnsureCredential(ctx, spec)
	if err != nil {
		t.Fatalf("EnsureCredential: %v", err)
	}
	s3c := s3Client(cfg.Endpoint, cred.AccessKeyID, cred.SecretAccessKey)
	root, err := adminapi.New(adminapi.Config{Endpoint: cfg.Endpoint, AccessKey: cfg.AccessKeyID, SecretKey: cfg.SecretAccessKey})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []driver.KeyMode{driver.KeepOnlyKey, driver.ReplaceKeys} {
		if err := root.SetUserStatus(ctx, n.user, false); err != nil {
			t.Fatalf("root: disable user: %v", err)
		}
		if err := put(ctx, s3c, n.bucket, "while-disabled"); err == nil {
			t.Fatal("a disabled user's key could write, want it refused (the test proves nothing)")
		}
		spec.Keys, spec.KeyID = mode, cred.AccessKeyID
		got, err := d.EnsureCredential(ctx, spec)
		if err != nil || got.AccessKeyID != cred.AccessKeyID {
			t.Fatalf("EnsureCredential(mode %d) of a disabled user = %+v, %v; want key %s kept", mode, got, err, cred.AccessKeyID)
		}
		if err := put(ctx, s3c, n.bucket, "enabled-again"); err != nil {
			t.Errorf("mode %d: the key after EnsureCredential of a disabled user: %v, want it to work", mode, err)
		}
	}
}
