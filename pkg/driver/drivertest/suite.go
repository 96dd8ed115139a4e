package drivertest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// Config points the suite at a driver and the server behind it.
type Config struct {
	// Driver is the driver under test.
	Driver driver.Driver
	// S3Endpoint is the server's S3 URL; empty means AWS S3.
	S3Endpoint string
	// IAMEndpoint is the server's IAM API URL, used with the root keys to
	// create a user behind the driver's back; empty means AWS IAM when
	// S3Endpoint is empty too, and skips that one check otherwise.
	IAMEndpoint string
	// Region is the S3 signing region; empty means us-east-1.
	Region string
	// IAMRegion is the signing region for IAMEndpoint; empty means
	// us-east-1.
	IAMRegion string
	// PathStyle makes the suite's S3 clients use path-style addressing.
	PathStyle bool
	// RootAccessKeyID and RootSecretAccessKey are the server's
	// administrator keys (see the package documentation).
	RootAccessKeyID     string
	RootSecretAccessKey string
	// Prefix starts every bucket and user name; empty means "bbtest".
	Prefix string
	// Propagation is how long an IAM change (a new key, a revoked key) may
	// take to reach S3. Zero means at once.
	Propagation time.Duration
	// NoVersioning says the server cannot keep object versions: the
	// Bucket/Versioning check then expects EnsureBucket with Versioning to
	// answer driver.ErrInvalid instead of a versioned bucket.
	NoVersioning bool
}

type suite struct {
	cfg     Config
	root    *s3.Client
	rootIAM *iam.Client // nil when the server's IAM API is unknown
}

// testTimeout bounds each subtest's calls.
const testTimeout = 5 * time.Minute

// Run runs the conformance suite as subtests of t. Subtests within a group
// run in parallel; Run returns when all have finished.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	if cfg.Driver == nil {
		t.Fatal("drivertest: Config.Driver is nil")
	}
	if cfg.RootAccessKeyID == "" || cfg.RootSecretAccessKey == "" {
		t.Fatal("drivertest: Config.RootAccessKeyID and RootSecretAccessKey are required")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "bbtest"
	}
	if err := driver.ValidatePrefix(cfg.Prefix); err != nil {
		t.Fatalf("drivertest: %v", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.IAMRegion == "" {
		cfg.IAMRegion = "us-east-1"
	}

	s := &suite{cfg: cfg}
	s.root = s.s3Client(cfg.RootAccessKeyID, cfg.RootSecretAccessKey)
	if cfg.IAMEndpoint != "" || cfg.S3Endpoint == "" {
		opts := iam.Options{
			Region:      cfg.Region,
			Credentials: credentials.NewStaticCredentialsProvider(cfg.RootAccessKeyID, cfg.RootSecretAccessKey, ""),
		}
		if cfg.IAMEndpoint != "" {
			opts.BaseEndpoint = &cfg.IAMEndpoint
			opts.Region = cfg.IAMRegion
		}
		s.rootIAM = iam.New(opts)
	}

	groups := []struct {
		name  string
		tests map[string]func(*testing.T)
	}{
		{"Observe", map[string]func(*testing.T){
			"EmptyRequestChecksBackend": s.testObserveEmpty,
			"Missing":                   s.testObserveMissing,
		}},
		{"Bucket", map[string]func(*testing.T){
			"EnsureTwice":           s.testEnsureBucketTwice,
			"OwnedByOther":          s.testBucketOwnedByOther,
			"Unmarked":              s.testBucketUnmarked,
			"MarkRemoved":           s.testBucketMarkRemoved,
			"DeleteMissing":         s.testDeleteMissingBucket,
			"DeleteEmptyTwice":      s.testDeleteEmptyBucketTwice,
			"DeleteNotEmpty":        s.testDeleteNotEmptyBucket,
			"PurgeMoreThanOnePage":  s.testPurgeManyObjects,
			"InvalidNameIsInvalid":  s.testInvalidBucketName,
			"EnsureAfterDeleteMade": s.testEnsureAfterDelete,
			"Versioning":            s.testVersioning,
			"Quota":                 s.testQuota,
		}},
		{"Credential", map[string]func(*testing.T){
			"EnsureTwiceKeepsKey": s.testCredentialTwice,
			"RevokeTwice":         s.testRevokeTwice,
			"RevokeWithExtras":    s.testRevokeWithExtras,
			"LostAnswer":          s.testLostAnswer,
			"AddKey":              s.testAddKey,
			"AddKeyAtLimit":       s.testAddKeyAtLimit,
			"KeepOnlyKey":         s.testKeepOnlyKey,
			"Scope":               s.testScope,
			"OwnedByOther":        s.testUserOwnedByOther,
			"Unmarked":            s.testUserUnmarked,
			"AdoptUnmarked":       s.testUserAdoptUnmarked,
			"InvalidSpec":         s.testInvalidSpec,
		}},
		{"Names", map[string]func(*testing.T){
			"DerivedNamesWork": s.testNames,
		}},
		{"Inventory", map[string]func(*testing.T){
			"ListsMarkedOnly": s.testInventory,
			"DeleteAccessKey": s.testDeleteAccessKey,
		}},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, name := range slices.Sorted(maps.Keys(g.tests)) {
				fn := g.tests[name]
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					fn(t)
				})
			}
		})
	}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// ensureBucket makes a bucket with the driver and deletes it after the test.
func (s *suite) ensureBucket(ctx context.Context, t *testing.T, spec driver.BucketSpec) {
	t.Helper()
	s.removeBucketAfter(t, spec.Name)
	if err := s.cfg.Driver.EnsureBucket(ctx, spec); err != nil {
		t.Fatalf("EnsureBucket(%q): %v", spec.Name, err)
	}
}

// needRootIAM skips t unless the suite has the root's IAM client; why says
// what t would do with it ("create a user behind the driver's back").
func (s *suite) needRootIAM(t *testing.T, why string) {
	t.Helper()
	if s.rootIAM == nil {
		t.Skip("drivertest: Config.IAMEndpoint is empty: cannot " + why)
	}
}

// bucketAndCredential ensures n's bucket and a read-write credential for
// n's user on it, both removed when t ends, and returns the credential's
// spec and the credential.
func (s *suite) bucketAndCredential(ctx context.Context, t *testing.T, n names) (driver.CredentialSpec, driver.Credential) {
	t.Helper()
	s.ensureBucket(ctx, t, driver.BucketSpec{Name: n.bucket, Owner: n.owner})
	spec := driver.CredentialSpec{UserName: n.user, Owner: n.owner, Bucket: n.bucket, Access: driver.AccessReadWrite}
	return spec, s.ensureCredential(ctx, t, spec)
}

// keyBeside makes a second key for spec's user the way a caller that may
// overlap another does (AddKey), checks that it is new and has its
// secret, and returns spec in AddKey mode and the key.
func (s *suite) keyBeside(ctx context.Context, t *testing.T, spec driver.CredentialSpec, first driver.Credential) (driver.CredentialSpec, driver.Credential) {
	t.Helper()
	spec.Keys = driver.AddKey
	return spec, s.wantNewKey(ctx, t, "EnsureCredential(AddKey)", spec, first)
}

// wantSoleKey fails t (what says when) unless n's user exists, is owned
// by n's owner and has cred's key alone, and the key can put into n's
// bucket. It returns the key's client.
func (s *suite) wantSoleKey(ctx context.Context, t *testing.T, what string, n names, cred driver.Credential) *s3.Client {
	t.Helper()
	obs := s.observe(ctx, t, driver.ObserveRequest{UserName: n.user})
	if !obs.UserExists || obs.UserOwner != n.owner || !slices.Equal(obs.KeyIDs, []string{cred.AccessKeyID}) {
		t.Errorf("%s: Observe = exists %v owner %q keys %q, want true %q [%s]",
			what, obs.UserExists, obs.UserOwner, obs.KeyIDs, n.owner, cred.AccessKeyID)
	}
	c := s.s3Client(cred.AccessKeyID, cred.SecretAccessKey)
	s.wantAllowed(ctx, t, what+": put with the key", func() error { return put(ctx, c, n.bucket, "k", "v") })
	return c
}

// wantNewKey calls EnsureCredential(spec) for a user that exists and fails
// t (named by what) unless it answers a key other than old's, with its
// secret, and does not claim to have created the user (NewUser).
func (s *suite) wantNewKey(ctx context.Context, t *testing.T, what string, spec driver.CredentialSpec, old driver.Credential) driver.Credential {
	t.Helper()
	got, err := s.cfg.Driver.EnsureCredential(ctx, spec)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if got.AccessKeyID == "" || got.SecretAccessKey == "" || got.AccessKeyID == old.AccessKeyID {
		t.Fatalf("%s = key %q (secret set %v), want a new key with its secret",
			what, got.AccessKeyID, got.SecretAccessKey != "")
	}
	if got.NewUser {
		// The engine would then leave the user's other keys live.
		t.Errorf("%s says NewUser for a user that existed", what)
	}
	return got
}

func (s *suite) ensureCredential(ctx context.Context, t *testing.T, spec driver.CredentialSpec) driver.Credential {
	t.Helper()
	s.revokeAfter(t, spec.UserName, spec.Owner)
	c, err := s.cfg.Driver.EnsureCredential(ctx, spec)
	if err != nil {
		t.Fatalf("EnsureCredential(%q): %v", spec.UserName, err)
	}
	if c.AccessKeyID == "" {
		t.Fatalf("EnsureCredential(%q) returned no access key id", spec.UserName)
	}
	return c
}

func (s *suite) observe(ctx context.Context, t *testing.T, req driver.ObserveRequest) driver.Observation {
	t.Helper()
	obs, err := s.cfg.Driver.Observe(ctx, req)
	if err != nil {
		t.Fatalf("Observe(%+v): %v", req, err)
	}
	return obs
}

// wantObject fails the test unless the root keys read body at bucket/key.
func (s *suite) wantObject(ctx context.Context, t *testing.T, bucket, key, body string) {
	t.Helper()
	got, err := get(ctx, s.root, bucket, key)
	if err != nil {
		t.Errorf("root: get %s/%s: %v (want it untouched)", bucket, key, err)
		return
	}
	if got != body {
		t.Errorf("root: %s/%s = %q, want %q (untouched)", bucket, key, got, body)
	}
}

func (s *suite) wantBucket(ctx context.Context, t *testing.T, bucket string, exists bool) {
	t.Helper()
	_, err := s.root.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &bucket})
	switch {
	case exists && err != nil:
		t.Errorf("root: head bucket %q: %v, want it to exist", bucket, err)
	case !exists && err == nil:
		t.Errorf("root: bucket %q exists, want it gone", bucket)
	case !exists && !notFound(err):
		t.Errorf("root: head bucket %q: %v, want 404", bucket, err)
	}
}

func wantErrorIs(t *testing.T, call string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want %v", call, err, target)
	}
}

func (s *suite) testObserveEmpty(t *testing.T) {
	if _, err := s.cfg.Driver.Observe(testContext(t), driver.ObserveRequest{}); err != nil {
		t.Errorf("Observe({}): %v, want nil: the backend answers and accepts the driver's credentials", err)
	}
}

func (s *suite) testObserveMissing(t *testing.T) {
	n := s.newNames(t)
	obs := s.observe(testContext(t), t, driver.ObserveRequest{Bucket: n.bucket, UserName: n.user})
	if obs.BucketExists || obs.UserExists || obs.BucketOwner != "" || obs.UserOwner != "" || len(obs.KeyIDs) != 0 {
		t.Errorf("Observe(missing names) = %+v, want the zero Observation", obs)
	}
}

func (s *suite) testEnsureBucketTwice(t *testing.T) {
	ctx := testContext(t)
	n := s.newNames(t)
	spec := driver.BucketSpec{Name: n.bucket, Owner: n.owner, Tags: map[string]string{"team": "a"}}
	s.ensureBucket(ctx, t, spec)
	if err := put(ctx, s.root, n.bucket, "data.txt", "first"); err != nil {
		t.Fatalf("root: put: %v", err)
	}
	if err := s.cfg.Driver.EnsureBucket(ctx, spec); err != nil {
		t.Fatalf("second EnsureBucket with the same owner: %v, want nil", err)
	}
	// Changed extra tags are applied to the bucket we already own.
	spec.Tags = map[string]string{"team": "b"}
	if err := s.cfg.Driver.EnsureBucket(ctx, spec); err != nil {
		t.Fatalf("EnsureBucket with new tags: %v, want nil", err)
	}
	out, err := s.root.GetBucketTagging(ctx, &s3.GetBucketTaggingInput{Bucket: &n.bucket})
	if err != nil {
		t.Fatalf("root: get bucket tags: %v", err)
	}
	var team []string
	for _, tag := range out.TagSet {
		if *tag.Key == "team" {
			team = append(team, *tag.Value)
		}
	}
	if !slices.Equal(team, []string{"b"}) {
		t.Errorf("bucket tag team = %q, want [b]: EnsureBucket replaces extra tags", team)
	}
	obs := s.observe(ctx, t, driver.ObserveRequest{Bucket: n.bucket})
	if !obs.BucketExists || obs.BucketOwner != n.owner {
		t.Errorf("Observe = exists %v owner %q, want true %q", obs.BucketExists, obs.BucketOwner, n.owner)
	}
	s.wantObject(ctx, t, n.bucket, "data.txt", "first")
}

func (s *suite) testBucketOwnedByOther(t *testing.T) {
	ctx := testContext(t)
	n := s.newNames(t)
	other := driver.OwnerMark("instance", "someone-else/"+randomID(t))
	s.ensureBucket(ctx, t, driver.BucketSpec{Name: n.bucket, Owner: other})
	if err := put(ctx, s.root, n.bucket, "theirs.txt", "their data"); err != nil {
		t.Fatalf("root: put: %v", err)
	}

	err := s.cfg.Driver.EnsureBucket(ctx, driver.BucketSpec{Name: n.bucket, Owner: n.owner})
	wantErrorIs(t, "EnsureBucket(bucket of another owner)", err, driver.ErrOwnedByOther)
	err = s.cfg.Driver.EnsureBucket(ctx, driver.BucketSpec{Name: n.bucket, Owner: n.owner, AdoptUnmarked: true})
	wantErrorIs(t, "EnsureBucket(bucket of another owner, AdoptUnmarked)", err, driver.ErrOwnedByOther)
	for _, purge := range []bool{false, true} {
		err = s.cfg.Driver.DeleteBucket(ctx, n.bucket, n.owner, purge)
		wantErrorIs(t, fmt.Sprintf("DeleteBucket(bucket of another owner, purge=%v)", purge), err, driver.ErrOwnedByOther)
	}

	obs := s.observe(ctx, t, driver.ObserveRequest{Bucket: n.bucket})
	if !obs.BucketExists || obs.BucketOwner != other {
		t.Errorf("Observe = exists %v owner %q, want true %q (mark untouched)", obs.BucketExists, obs.BucketOwner, other)
	}
	s.wantObject(ctx, t, n.bucket, "theirs.txt", "their data")
}

func (s *suite) testBucketUnmarked(t *testing.T) {
	ctx := testContext(t)
	n := s.newNames(t)
	s.createRootBucket(ctx, t, n.bucket, "theirs.txt", "their data")

	err := s.cfg.Driver.EnsureBucket(ctx, driver.BucketSpec{Name: n.bucket, Owner: n.owner})
	wantErrorIs(t, "EnsureBucket(unmarked bucket)", err, driver.ErrOwnedByOther)
	for _, purge := range []bool{false, true} {
		err = s.cfg.Driver.DeleteBucket(ctx, n.bucket, n.owner, purge)
		wantErrorIs(t, fmt.Sprintf("DeleteBucket(unmarked bucket, purge=%v)", purge), err, driver.ErrOwnedByOther)
	}
	obs := s.observe(ctx, t, driver.ObserveRequest{Bucket: n.bucket})
	if !obs.BucketExists || obs.BucketOwner != "" {
		t.Errorf("Observe = exists %v owner %q, want true and no owner", obs.BucketExists, obs.BucketOwner)
	}
	s.wantObject(ctx, t, n.bucket, "theirs.txt", "their data")

	// With AdoptUnmarked (the engine knows it made the bucket and crashed
	// before marking it) the bucket is adopted, contents and all.
	if err := s.cfg.Driver.EnsureBucket(ctx, driver.BucketSpec{Name: n.bucket, Owner: n.owner, AdoptUnmarked: true}); err != nil {
		t.Fatalf("EnsureBucket(unmarked bucket, AdoptUnmarked): %v, want nil", err)
	}
	obs = s.observe(ctx, t, driver.ObserveRequest{Bucket: n.bucket})
	if obs.BucketOwner != n.owner {
		t.Errorf("after adoption Observe owner = %q, want %q", obs.BucketOwner, n.owner)
	}
	s.wantObject(ctx, t, n.bucket, "theirs.txt", "their data")
	err = s.cfg.Driver.DeleteBucket(ctx, n.bucket, n.owner, false)
	wantErrorIs(t, "DeleteBucket(adopted non-empty bucket, purge=false)", err, driver.ErrBucketNotEmpty)
}

// testBucketMarkRemoved checks a bucket the driver made whose mark the
// root user removed since: the driver reads the mark on every call and
// keeps no memory of having made it, so the bucket is refused, untouched,
// by EnsureBucket and DeleteBucket without AdoptUnmarked. Whether a caller
// may set it for such a bucket is bucketbroker's internal/ensure: never
// once its record says it was created and marked.
func (s *suite) testBucketMarkRemoved(t *testing.T) {
	ctx := testContext(t)
	n := s.newNames(t)
	s.ensureBucket(ctx, t, driver.BucketSpec{Name: n.bucket, Owner: n.owner})
	if err := put(ctx, s.root, n.bucket, "data.txt", "keep me"); err != nil {
		t.Fatalf("root: put: %v", err)
	}
	if _, err := s.root.DeleteBucketTagging(ctx, &s3.DeleteBucketTaggingInput{Bucket: &n.bucket}); err != nil {
		t.Fatalf("root: delete the bucket's tags: %v", err)
	}

	err := s.cfg.Driver.EnsureBucket(ctx, driver.BucketSpec{Name: n.bucket, Owner: n.owner})
	wantErrorIs(t, "EnsureBucket(bucket whose mark was removed)", err, driver.ErrOwnedByOther)
	for _, purge := range []bool{false, true} {
		err = s.cfg.Driver.DeleteBucket(ctx, n.bucket, n.owner, purge)
		wantErrorIs(t, fmt.Sprintf("DeleteBucket(bucket whose mark was removed, purge=%v)", purge), err, driver.ErrOwnedByOther)
	}
	obs := s.observe(ctx, t, driver.ObserveRequest{Bucket: n.bucket})
	if !obs.BucketExists || obs.BucketOwner != "" {
		t.Errorf("Observe = exists %v owner %q, want true and no owner", obs.BucketExists, obs.BucketOwner)
	}
	s.wantObject(ctx, t, n.bucket, "data.txt", "keep me")
}

func (s *suite) testDeleteMissingBucket(t *testing.T) {
	ctx := testContext(t)
	n := s.newNames(t)
	for _, purge := range []bool{false, true} {
		if err := s.cfg.Driver.DeleteBucket(ctx, n.bucket, n.owner, purge); err != nil {
			t.Errorf("DeleteBucket(missing, purge=%v): %v, want nil", purge, err)
		}
	}
}

func (s *suite) testDeleteEmptyBucketTwice(t *testing.T) {
	ctx := testContext(t)
	n := s.newNames(t)
	s.ensureBucket(ctx, t, driver.BucketSpec{Name: n.bucket, Owner: n.owner})
	for i := range 2 {
		if err := s.cfg.Driver.DeleteBucket(ctx, n.bucket, n.owner, false); err != nil {
			t.Fatalf("DeleteBucket(empty bucket) call %d: %v, want nil", i+1, err)
		}
		s.wantBucket(ctx, t, n.bucket, false)
	}
}

func (s *suite) testDeleteNotEmptyBucket(t *testing.T) {
	ctx := testContext(t)
	n := s.newNames(t)
	s.ensureBucket(ctx, t, driver.BucketSpec{Name: n.bucket, Owner: n.owner})
	want := []string{"a.txt", "dir/b.txt", "dir/sub/c.txt"}
	for _, k := range want {
		if err := put(ctx, s.root, n.bucket, k, "content of "+k); err != nil {
			t.Fatalf("root: put %s: %v", k, err)
		}
	}

	err := s.cfg.Driver.DeleteBucket(ctx, n.bucket, n.owner, false)
	wantErrorIs(t, "DeleteBucket(non-empty, purge=false)", err, driver.ErrBucketNotEmpty)
	got, err := list(ctx, s.root, n.bucket)
	if err != nil {
		t.Fatalf("root: list: %v", err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("after refused delete objects = %q, want %q (intact)", got, want)
	}

	if err := s.cfg.Driver.DeleteBucket(ctx, n.bucket, n.owner, true); err != nil {
		t.Fatalf("DeleteBucket(non-empty, purge=true): %v, want nil", err)
	}
	s.wantBucket(ctx, t, n.bucket, false)
	if err := s.cfg.Driver.DeleteBucket(ctx, n.bucket, n.owner, true); err != nil {
		t.Errorf("DeleteBucket after purge: %v, want nil", err)
	}
}

func (s *suite) testPurgeManyObjects(t *testing.T) {
	ctx := testContext(t)
	n := s.newNames(t)
	s.ensureBucket(ctx, t, driver.BucketSpec{Name: n.bucket, Owner: n.owner})
	// More than one ListObjectsV2 page and one DeleteObjects batch (1000).
	const count = 1010
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		next = make(chan int)
	)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				if err := put(ctx, s.root, n.bucket, fmt.Sprintf("obj/%05d", i), "x"); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range count {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("root: put %d objects: %v", count, err)
	}
	if err := s.cfg.Driver.DeleteBucket(ctx, n.bucket, n.owner, true); err != nil {
		t.Fatalf("DeleteBucket(%d objects, purge=true): %v, want nil", count, err)
	}
	s.wantBucket(ctx, t, n.bucket, false)
}

func (s *suite) testInvalidBucketName(t *testing.T) {
	ctx := testContext(t)
	n := s.newNames(t)
	bad := "Not_A_Valid..Bucket"
	s.removeBucketAfter(t, bad)
	err := s.cfg.Driver.EnsureBucket(ctx, driver.BucketSpec{Name: bad, Owner: n.owner})
	wantErrorIs(t, "EnsureBucket(invalid name)", err, driver.ErrInvalid)
	if !driver.Permanent(err) {
		t.Errorf("EnsureBucket(invalid name): error %v is not permanent", err)
	}
}

func (s *suite) testEnsureAfterDelete(t *testing.T) {
	ctx := testContext(t)
	n := s.newNames(t)
	spec := driver.BucketSpec{Name: n.bucket, Owner: n.owner}
	s.ensureBucket(ctx, t, spec)
	if err := s.cfg.Driver.DeleteBucket(ctx, n.bucket, n.owner, false); err != nil {
		t.Fatalf("DeleteBucket: %v", err)
	}
	// A provision retried after a deprovision makes the bucket again.
	if err := s.cfg.Driver.EnsureBucket(ctx, spec); err != nil {
		t.Fatalf("EnsureBucket after delete: %v", err)
	}
	s.wantBucket(ctx, t, n.bucket, true)
}

func (s *suite) testCredentialTwice(t *testing.T) {
	ctx := testContext(t)
	n := s.newNames(t)
	spec, first := s.bucketAndCredential(ctx, t, n)
	if first.SecretAccessKey == "" {
		t.Fatalf("first EnsureCredential returned no secret")
	}

	spec.KeyID = first.AccessKeyID
	second, err := s.cfg.Driver.EnsureCredential(ctx, spec)
	if err != nil {
		t.Fatalf("second EnsureCredential(ReplaceKeys, KeyID=first): %v", err)
	}
	if second != (driver.Credential{AccessKeyID: first.AccessKeyID}) {
		t.Errorf("second EnsureCredential = key %q with secret set %v, want key %q and no secret",
			second.AccessKeyID, second.SecretAccessKey != "", first.AccessKeyID)
	}
	s.wantSoleKey(ctx, t, "after keeping the key", n, first)
}

func (s *suite) testRevokeTwice(t *testing.T) {
	ctx := testContext(t)
	n := s.newNames(t)
	_, cred := s.bucketAndCredential(ctx, t, n)
	c := s.s3Client(cred.AccessKeyID, cred.SecretAccessKey)
	s.wantAllowed(ctx, t, "put before revoke", func() error { return put(ctx, c, n.bucket, "k", "v") })

	for i := range 2 {
		if err := s.cfg.Driver.RevokeCredential(ctx, n.user, n.owner); err != nil {
			t.Fatalf("RevokeCredential call %d: %v, want nil", i+1, err)
		}
	}
	s.wantDenied(ctx, t, "list with the revoked key", func() error { _, err := list(ctx, c, n.bucket); return err })
	obs := s.observe(ctx, t, driver.ObserveRequest{UserName: n.user})
	if obs.UserExists || len(obs.KeyIDs) != 0 {
		t.Errorf("after revoke Observe = exists %v keys %q, want no user", obs.UserExists, obs.KeyIDs)
	}
}

// testRevokeWithExtras: a user of ours to which someone added an inline
// policy of another name and a second key is still revoked whole. The
// driver deletes the policy it knows and the keys it lists; the server's
// refusal to delete a user that still has policies or keys (AWS and
// versitygw answer DeleteConflict) must lead it to the rest.
func (s *suite) testRevokeWithExtras(t *testing.T) {
	s.needRootIAM(t, "add to the user behind the driver's back")
	ctx := testContext(t)
	n := s.newNames(t)
	_, cred := s.bucketAndCredential(ctx, t, n)
	doc := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:ListBucket"],"Resource":["arn:aws:s3:::` + n.bucket + `"]}]}`
	if _, err := s.rootIAM.PutUserPolicy(ctx, &iam.PutUserPolicyInput{
		UserName: &n.user, PolicyName: aws.String("added-by-someone"), PolicyDocument: &doc,
	}); err != nil {
		t.Fatalf("root: put a second policy on %q: %v", n.user, err)
	}
	extra, err := s.rootIAM.CreateAccessKey(ctx, &iam.CreateAccessKeyInput{UserName: &n.user})
	if err != nil {
		t.Fatalf("root: create a second key for %q: %v", n.user, err)
	}
	c := s.s3Client(aws.ToString(extra.AccessKey.AccessKeyId), aws.ToString(extra.AccessKey.SecretAccessKey))
	s.wantAllowed(ctx, t, "list with the added key", func() error { _, err := list(ctx, c, n.bucket); return err })

	if err := s.cfg.Driver.RevokeCredential(ctx, n.user, n.owner); err != nil {
		t.Fatalf("RevokeCredential: %v, want nil", err)
	}
	for what, k := range map[string]*s3.Client{
		"the driver's key": s.s3Client(cred.AccessKeyID, cred.SecretAccessKey),
		"the added key":    c,
	} {
		s.wantDenied(ctx, t, "list with "+what+" after revoke", func() error { _, err := list(ctx, k, n.bucket); return err })
	}
	obs := s.observe(ctx, t, driver.ObserveRequest{UserName: n.user})
	if obs.UserExists || len(obs.KeyIDs) != 0 {
		t.Errorf("after revoke Observe = exists %v keys %q, want no user", obs.UserExists, obs.KeyIDs)
	}
}

func (s *suite) testLostAnswer(t *testing.T) {
	ctx := testContext(t)
	n := s.newNames(t)
	spec, lost := s.bucketAndCredential(ctx, t, n)
	lostClient := s.s3Client(lost.AccessKeyID, lost.SecretAccessKey)
	// Prove the first key is live, so that its rejection below means it
	// was deleted and not that it never worked.
	s.wantAllowed(ctx, t, "put with the first key", func() error { return put(ctx, lostClient, n.bucket, "k", "v") })

	// The caller crashed before recording the first answer: it calls again
	// knowing no key.
	got := s.wantNewKey(ctx, t, "EnsureCredential after a lost answer", spec, lost)
	obs := s.observe(ctx, t, driver.ObserveRequest{UserName: n.user})
	if !slices.Equal(obs.KeyIDs, []string{got.AccessKeyID}) {
		t.Errorf("live keys = %q, want only the new one [%s]", obs.KeyIDs, got.AccessKeyID)
	}
	s.wantDenied(ctx, t, "put with the lost key", func() error { return put(ctx, lostClient, n.bucket, "k2", "v") })
	c := s.s3Client(got.AccessKeyID, got.SecretAccessKey)
	s.wantAllowed(ctx, t, "put with the new key", func() error { return put(ctx, c, n.bucket, "k3", "v") })

	// A recorded key that is gone (deleted behind our back) is replaced.
	spec.KeyID = lost.AccessKeyID
	again, err := s.cfg.Driver.EnsureCredential(ctx, spec)
	if err != nil {
		t.Fatalf("EnsureCredential(ReplaceKeys, KeyID=deleted key): %v", err)
	}
	if again.AccessKeyID == lost.AccessKeyID || again.SecretAccessKey == "" {
		t.Errorf("EnsureCredential(ReplaceKeys, KeyID=deleted key) = key %q (secret set %v), want a new key with its secret",
			again.AccessKeyID, again.SecretAccessKey != "")
	}
	obs = s.observe(ctx, t, driver.ObserveRequest{UserName: n.user})
	if !slices.Equal(obs.KeyIDs, []string{again.AccessKeyID}) {
		t.Errorf("live keys = %q, want only [%s]", obs.KeyIDs, again.AccessKeyID)
	}
}

// testAddKey is two callers of one credential that overlap: one has
// recorded its key; the other makes a key beside it (AddKey), and the
// first key keeps working until the second caller, having recorded its
// own, deletes the others (KeepOnlyKey).
func (s *suite) testAddKey(t *testing.T) {
	ctx := testContext(t)
	n := s.newNames(t)
	spec, first := s.bucketAndCredential(ctx, t, n)
	spec, second := s.keyBeside(ctx, t, spec, first)
	both := []string{first.AccessKeyID, second.AccessKeyID}
	slices.Sort(both)
	obs := s.observe(ctx, t, driver.ObserveRequest{UserName: n.user})
	if got := slices.Sorted(slices.Values(obs.KeyIDs)); !slices.Equal(got, both) {
		t.Errorf("live keys = %q, want both %q", got, both)
	}
	c1 := s.s3Client(first.AccessKeyID, first.SecretAccessKey)
	c2 := s.s3Client(second.AccessKeyID, second.SecretAccessKey)
	s.wantAllowed(ctx, t, "put with the first key", func() error { return put(ctx, c1, n.bucket, "k1", "v") })
	s.wantAllowed(ctx, t, "put with the second key", func() error { return put(ctx, c2, n.bucket, "k2", "v") })

	// The caller that recorded the second key deletes the others.
	spec.Keys, spec.KeyID = driver.KeepOnlyKey, second.AccessKeyID
	if got, err := s.cfg.Driver.EnsureCredential(ctx, spec); err != nil || got != (driver.Credential{AccessKeyID: second.AccessKeyID}) {
		t.Fatalf("EnsureCredential(KeepOnlyKey, KeyID=second) = key %q (secret set %v), %v; want the second key without its secret",
			got.AccessKeyID, got.SecretAccessKey != "", err)
	}
	obs = s.observe(ctx, t, driver.ObserveRequest{UserName: n.user})
	if !slices.Equal(obs.KeyIDs, []string{second.AccessKeyID}) {
		t.Errorf("live keys = %q, want only [%s]", obs.KeyIDs, second.AccessKeyID)
	}
	s.wantDenied(ctx, t, "put with the deleted first key", func() error { return put(ctx, c1, n.bucket, "k3", "v") })
}

// testAddKeyAtLimit: AddKey never deletes a key the caller did not name in
// Evict, whatever the backend's limit on a user's keys: with no room left
// it fails with *driver.KeyLimitError and changes nothing; named keys give
// way (guarantee 24: another holder may have recorded any other).
func (s *suite) testAddKeyAtLimit(t *testing.T) {
	ctx := testContext(t)
	n := s.newNames(t)
	s.ensureBucket(ctx, t, driver.BucketSpec{Name: n.bucket, Owner: n.owner})
	spec := driver.CredentialSpec{UserName: n.user, Owner: n.owner, Bucket: n.bucket, Access: driver.AccessReadWrite, Keys: driver.AddKey}
	s.revokeAfter(t, n.user, n.owner)
	var made []string
	var full *driver.KeyLimitError
	for len(made) < 10 {
		c, err := s.cfg.Driver.EnsureCredential(ctx, spec)
		if errors.As(err, &full) {
			break
		}
		if err != nil {
			t.Fatalf("EnsureCredential(AddKey) after %d keys: %v", len(made), err)
		}
		made = append(made, c.AccessKeyID)
	}
	obs := s.observe(ctx, t, driver.ObserveRequest{UserName: n.user})
	if got, want := slices.Sorted(slices.Values(obs.KeyIDs)), slices.Sorted(slices.Values(made)); !slices.Equal(got, want) {
		t.Fatalf("live keys = %q, want every key made %q", got, want)
	}
	if full == nil {
		t.Skipf("no limit on a user's keys reached with %d keys", len(made))
	}
	if got, want := slices.Sorted(slices.Values(full.KeyIDs)), slices.Sorted(slices.Values(made)); !slices.Equal(got, want) {
		t.Errorf("KeyLimitError names %q, want the live keys %q", got, want)
	}
	if len(made) < 2 {
		t.Skipf("a limit of %d key leaves no key to keep beside an evicted one", len(made))
	}
	// The newest may go; the oldest (as if recorded) must stay.
	spec.Evict = made[1:]
	c, err := s.cfg.Driver.EnsureCredential(ctx, spec)
	if err != nil {
		t.Fatalf("EnsureCredential(AddKey, Evict=%q): %v", spec.Evict, err)
	}
	obs = s.observe(ctx, t, driver.ObserveRequest{UserName: n.user})
	if !slices.Contains(obs.KeyIDs, made[0]) || !slices.Contains(obs.KeyIDs, c.AccessKeyID) {
		t.Errorf("live keys = %q, want the unnamed %s and the new %s", obs.KeyIDs, made[0], c.AccessKeyID)
	}
}

// testKeepOnlyKey: with KeepOnlyKey, a KeyID that is gone makes
// EnsureCredential fail with ErrKeyGone and delete nothing (the caller
// then makes a key beside the others and records it first); with the key
// live, the others are deleted. A user that is gone is not created.
func (s *suite) testKeepOnlyKey(t *testing.T) {
	ctx := testContext(t)
	n := s.newNames(t)
	spec, first := s.bucketAndCredential(ctx, t, n)
	spec, second := s.keyBeside(ctx, t, spec, first)
	spec.Keys = driver.KeepOnlyKey
	spec.KeyID = "AKIAGONE" + strings.Repeat("0", 12)
	_, err := s.cfg.Driver.EnsureCredential(ctx, spec)
	wantErrorIs(t, "EnsureCredential(KeepOnlyKey, KeyID=gone)", err, driver.ErrKeyGone)
	both := slices.Sorted(slices.Values([]string{first.AccessKeyID, second.AccessKeyID}))
	obs := s.observe(ctx, t, driver.ObserveRequest{UserName: n.user})
	if got := slices.Sorted(slices.Values(obs.KeyIDs)); !slices.Equal(got, both) {
		t.Errorf("live keys = %q, want both %q untouched", got, both)
	}
	spec.KeyID = second.AccessKeyID
	if got, err := s.cfg.Driver.EnsureCredential(ctx, spec); err != nil || got != (driver.Credential{AccessKeyID: second.AccessKeyID}) {
		t.Fatalf("EnsureCredential(KeepOnlyKey, KeyID=second) = key %q (secret set %v), %v; want the second key without its secret",
			got.AccessKeyID, got.SecretAccessKey != "", err)
	}
	obs = s.observe(ctx, t, driver.ObserveRequest{UserName: n.user})
	if !slices.Equal(obs.KeyIDs, []string{second.AccessKeyID}) {
		t.Errorf("live keys = %q, want only [%s]", obs.KeyIDs, second.AccessKeyID)
	}

	if err := s.cfg.Driver.RevokeCredential(ctx, n.user, n.owner); err != nil {
		t.Fatalf("RevokeCredential: %v", err)
	}
	_, err = s.cfg.Driver.EnsureCredential(ctx, spec)
	wantErrorIs(t, "EnsureCredential(KeepOnlyKey) of a revoked user", err, driver.ErrKeyGone)
	if obs := s.observe(ctx, t, driver.ObserveRequest{UserName: n.user}); obs.UserExists {
		t.Errorf("after KeepOnlyKey of a revoked user Observe = exists, keys %q; want no user", obs.KeyIDs)
	}
}

func (s *suite) testScope(t *testing.T) {
	ctx := testContext(t)
	own, other := s.newNames(t), s.newNames(t)
	s.ensureBucket(ctx, t, driver.BucketSpec{Name: own.bucket, Owner: own.owner})
	s.createRootBucket(ctx, t, other.bucket, "seed.txt", "other seed")
	if err := put(ctx, s.root, own.bucket, "seed.txt", "own seed"); err != nil {
		t.Fatalf("root: put seed: %v", err)
	}
	users := map[string]names{}
	cred := func(t *testing.T, access driver.Access) *s3.Client {
		n := s.newNames(t)
		users[t.Name()] = n
		c := s.ensureCredential(ctx, t, driver.CredentialSpec{UserName: n.user, Owner: n.owner, Bucket: own.bucket, Access: access})
		return s.s3Client(c.AccessKeyID, c.SecretAccessKey)
	}
	putIn := func(c *s3.Client, b, k string) func() error { return func() error { return put(ctx, c, b, k, "x") } }
	getIn := func(c *s3.Client, b, k string) func() error {
		return func() error { _, err := get(ctx, c, b, k); return err }
	}
	listIn := func(c *s3.Client, b string) func() error {
		return func() error { _, err := list(ctx, c, b); return err }
	}
	delIn := func(c *s3.Client, b, k string) func() error { return func() error { return del(ctx, c, b, k) } }

	t.Run("ReadWrite", func(t *testing.T) {
		c := cred(t, driver.AccessReadWrite)
		s.wantAllowed(ctx, t, "put own", putIn(c, own.bucket, "rw.txt")) // first: waits for the key
		s.wantAllowed(ctx, t, "get own", getIn(c, own.bucket, "seed.txt"))
		s.wantAllowed(ctx, t, "list own", listIn(c, own.bucket))
		s.wantAllowed(ctx, t, "multipart own", func() error { return multipart(ctx, c, own.bucket, "rw-mp.bin", "part") })
		s.wantAllowed(ctx, t, "delete own", delIn(c, own.bucket, "rw.txt"))
		s.wantDenied(ctx, t, "get other bucket", getIn(c, other.bucket, "seed.txt"))
		s.wantDenied(ctx, t, "put other bucket", putIn(c, other.bucket, "rw.txt"))
		s.wantDenied(ctx, t, "list other bucket", listIn(c, other.bucket))
		s.wantDenied(ctx, t, "delete other bucket", delIn(c, other.bucket, "seed.txt"))
		s.wantDenied(ctx, t, "create bucket", func() error {
			name := s.newNames(t).bucket
			s.removeBucketAfter(t, name)
			_, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &name})
			return err
		})
	})
	t.Run("ReadOnly", func(t *testing.T) {
		c := cred(t, driver.AccessReadOnly)
		s.wantAllowed(ctx, t, "get own", getIn(c, own.bucket, "seed.txt"))
		s.wantAllowed(ctx, t, "list own", listIn(c, own.bucket))
		s.wantDenied(ctx, t, "put own", putIn(c, own.bucket, "ro.txt"))
		s.wantDenied(ctx, t, "delete own", delIn(c, own.bucket, "seed.txt"))
		s.wantDenied(ctx, t, "get other bucket", getIn(c, other.bucket, "seed.txt"))
	})
	t.Run("WriteOnly", func(t *testing.T) {
		c := cred(t, driver.AccessWriteOnly)
		s.wantAllowed(ctx, t, "put own", putIn(c, own.bucket, "wo.txt"))
		s.wantAllowed(ctx, t, "multipart own", func() error { return multipart(ctx, c, own.bucket, "wo-mp.bin", "part") })
		s.wantDenied(ctx, t, "get own", getIn(c, own.bucket, "seed.txt"))
		s.wantDenied(ctx, t, "list own", listIn(c, own.bucket))
		s.wantDenied(ctx, t, "delete own", delIn(c, own.bucket, "seed.txt"))
		s.wantDenied(ctx, t, "put other bucket", putIn(c, other.bucket, "wo.txt"))
	})
	t.Run("Revoked", func(t *testing.T) {
		c := cred(t, driver.AccessReadWrite)
		s.wantAllowed(ctx, t, "put own", putIn(c, own.bucket, "rev.txt"))
		n := users[t.Name()]
		if err := s.cfg.Driver.RevokeCredential(ctx, n.user, n.owner); err != nil {
			t.Fatalf("RevokeCredential: %v", err)
		}
		s.wantDenied(ctx, t, "put own after revoke", putIn(c, own.bucket, "rev.txt"))
		s.wantDenied(ctx, t, "get own after revoke", getIn(c, own.bucket, "seed.txt"))
		s.wantDenied(ctx, t, "list own after revoke", listIn(c, own.bucket))
	})
	s.wantObject(ctx, t, own.bucket, "seed.txt", "own seed")
	s.wantObject(ctx, t, other.bucket, "seed.txt", "other seed")
}

func (s *suite) testUserOwnedByOther(t *testing.T) {
	ctx := testContext(t)
	n := s.newNames(t)
	other := driver.OwnerMark("binding", "someone-else/"+randomID(t))
	s.ensureBucket(ctx, t, driver.BucketSpec{Name: n.bucket, Owner: n.owner})
	theirs := s.ensureCredential(ctx, t, driver.CredentialSpec{UserName: n.user, Owner: other, Bucket: n.bucket, Access: driver.AccessReadOnly})

	_, err := s.cfg.Driver.EnsureCredential(ctx, driver.CredentialSpec{UserName: n.user, Owner: n.owner, Bucket: n.bucket, Access: driver.AccessReadWrite})
	wantErrorIs(t, "EnsureCredential(user of another owner)", err, driver.ErrOwnedByOther)
	_, err = s.cfg.Driver.EnsureCredential(ctx, driver.CredentialSpec{UserName: n.user, Owner: n.owner, Bucket: n.bucket, Access: driver.AccessReadWrite, AdoptUnmarked: true})
	wantErrorIs(t, "EnsureCredential(user of another owner, AdoptUnmarked)", err, driver.ErrOwnedByOther)
	err = s.cfg.Driver.RevokeCredential(ctx, n.user, n.owner)
	wantErrorIs(t, "RevokeCredential(user of another owner)", err, driver.ErrOwnedByOther)

	obs := s.observe(ctx, t, driver.ObserveRequest{UserName: n.user})
	if !obs.UserExists || obs.UserOwner != other || !slices.Equal(obs.KeyIDs, []string{theirs.AccessKeyID}) {
		t.Errorf("Observe = exists %v owner %q keys %q, want true %q [%s] (untouched)",
			obs.UserExists, obs.UserOwner, obs.KeyIDs, other, theirs.AccessKeyID)
	}
	// Still read-only: the refused call must not have widened the policy.
	c := s.s3Client(theirs.AccessKeyID, theirs.SecretAccessKey)
	s.wantAllowed(ctx, t, "list with their key", func() error { _, err := list(ctx, c, n.bucket); return err })
	s.wantDenied(ctx, t, "put with their read-only key", func() error { return put(ctx, c, n.bucket, "k", "v") })
}

func (s *suite) testUserUnmarked(t *testing.T) {
	s.needRootIAM(t, "create a user behind the driver's back")
	ctx := testContext(t)
	n := s.newNames(t)
	s.ensureBucket(ctx, t, driver.BucketSpec{Name: n.bucket, Owner: n.owner})
	key := s.createRootUser(ctx, t, n.user)

	_, err := s.cfg.Driver.EnsureCredential(ctx, driver.CredentialSpec{UserName: n.user, Owner: n.owner, Bucket: n.bucket, Access: driver.AccessReadWrite})
	wantErrorIs(t, "EnsureCredential(unmarked user)", err, driver.ErrOwnedByOther)
	err = s.cfg.Driver.RevokeCredential(ctx, n.user, n.owner)
	wantErrorIs(t, "RevokeCredential(unmarked user)", err, driver.ErrOwnedByOther)

	keys, policies := s.rootUserState(ctx, t, n.user)
	if !slices.Equal(keys, []string{key}) || len(policies) != 0 {
		t.Errorf("root: user %q has keys %q and policies %q, want keys [%s] and no policy (untouched)", n.user, keys, policies, key)
	}
	obs := s.observe(ctx, t, driver.ObserveRequest{UserName: n.user})
	if !obs.UserExists || obs.UserOwner != "" {
		t.Errorf("Observe = exists %v owner %q, want true and no owner", obs.UserExists, obs.UserOwner)
	}
}

// testUserAdoptUnmarked checks the user a crash leaves on a backend that
// marks users in a second call: a user of the derived name without any
// mark. Without AdoptUnmarked it is refused and untouched; with it (the
// caller's record proves it attempted the creation) it is adopted: marked,
// its unknown key deleted, one new key live and scoped to the bucket.
func (s *suite) testUserAdoptUnmarked(t *testing.T) {
	s.needRootIAM(t, "create a user behind the driver's back")
	ctx := testContext(t)
	n := s.newNames(t)
	s.ensureBucket(ctx, t, driver.BucketSpec{Name: n.bucket, Owner: n.owner})
	// Registered first, so it runs after the root user's own cleanup.
	s.revokeAfter(t, n.user, n.owner)
	stray := s.createRootUser(ctx, t, n.user)
	spec := driver.CredentialSpec{UserName: n.user, Owner: n.owner, Bucket: n.bucket, Access: driver.AccessReadWrite}

	_, err := s.cfg.Driver.EnsureCredential(ctx, spec)
	wantErrorIs(t, "EnsureCredential(unmarked user) without AdoptUnmarked", err, driver.ErrOwnedByOther)
	if keys, policies := s.rootUserState(ctx, t, n.user); !slices.Equal(keys, []string{stray}) || len(policies) != 0 {
		t.Fatalf("root: after a refusal user %q has keys %q and policies %q, want keys [%s] and no policy (untouched)", n.user, keys, policies, stray)
	}

	spec.AdoptUnmarked = true
	cred := s.wantNewKey(ctx, t, "EnsureCredential(unmarked user, AdoptUnmarked)", spec, driver.Credential{AccessKeyID: stray})
	c := s.wantSoleKey(ctx, t, "after adoption", n, cred)
	other := s.newNames(t)
	s.createRootBucket(ctx, t, other.bucket, "seed.txt", "other seed")
	s.wantDenied(ctx, t, "get from another bucket with the adopted user's key", func() error { _, err := get(ctx, c, other.bucket, "seed.txt"); return err })

	// Adopted, the user is ours like any other: the leak audit lists it,
	// and a repeated call keeps the key.
	if a, ok := s.cfg.Driver.(driver.Auditable); ok {
		inv := s.inventory(ctx, t, a, n.user)
		want := []driver.OwnedUser{{Name: n.user, Owner: n.owner, KeyIDs: []string{cred.AccessKeyID}}}
		if diff := cmp.Diff(want, inv.Users); diff != "" {
			t.Errorf("Inventory(%q) users after adoption: -want +got:\n%s", n.user, diff)
		}
	}
	spec.KeyID = cred.AccessKeyID
	again, err := s.cfg.Driver.EnsureCredential(ctx, spec)
	if err != nil || again != (driver.Credential{AccessKeyID: cred.AccessKeyID}) {
		t.Errorf("EnsureCredential after adoption = key %q (secret set %v), %v; want key %q and no secret",
			again.AccessKeyID, again.SecretAccessKey != "", err, cred.AccessKeyID)
	}
}

func (s *suite) testInvalidSpec(t *testing.T) {
	ctx := testContext(t)
	n := s.newNames(t)
	s.ensureBucket(ctx, t, driver.BucketSpec{Name: n.bucket, Owner: n.owner})
	s.revokeAfter(t, n.user, n.owner)
	spec := driver.CredentialSpec{UserName: n.user, Owner: n.owner, Bucket: n.bucket, Access: driver.AccessReadWrite}
	for what, bad := range map[string]func(*driver.CredentialSpec){
		`Access "admin"`:            func(s *driver.CredentialSpec) { s.Access = "admin" },
		"an unknown key mode":       func(s *driver.CredentialSpec) { s.Keys = driver.KeepOnlyKey + 1 },
		"KeepOnlyKey without KeyID": func(s *driver.CredentialSpec) { s.Keys = driver.KeepOnlyKey },
	} {
		spec := spec
		bad(&spec)
		_, err := s.cfg.Driver.EnsureCredential(ctx, spec)
		wantErrorIs(t, "EnsureCredential with "+what, err, driver.ErrInvalid)
		if obs := s.observe(ctx, t, driver.ObserveRequest{UserName: n.user}); obs.UserExists {
			t.Errorf("EnsureCredential with %s created user %q", what, n.user)
		}
	}
}

func (s *suite) testNames(t *testing.T) {
	ids := map[string]struct {
		reason string
		id     string
	}{
		"Long":    {"ids of any length map to names within the limits", strings.Repeat("x", 5000)},
		"Unicode": {"non-ASCII ids map to valid names", "ünïcødé-ид-名前-🪣"},
		"Dots":    {"path-like ids cannot escape", "../x"},
		"Spaces":  {"blank and space-padded ids map to valid names", " a b "},
		"Empty":   {"even an empty id gives a valid name", ""},
	}
	for name, tc := range ids {
		n := s.namesFor("t"+randomID(t), tc.id)
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			s.ensureBucket(ctx, t, driver.BucketSpec{Name: n.bucket, Owner: n.owner})
			cred := s.ensureCredential(ctx, t, driver.CredentialSpec{UserName: n.user, Owner: n.owner, Bucket: n.bucket, Access: driver.AccessReadWrite})
			c := s.s3Client(cred.AccessKeyID, cred.SecretAccessKey)
			s.wantAllowed(ctx, t, tc.reason+": put with the credential", func() error { return put(ctx, c, n.bucket, "k", "v") })
			obs := s.observe(ctx, t, driver.ObserveRequest{Bucket: n.bucket, UserName: n.user})
			if obs.BucketOwner != n.owner || obs.UserOwner != n.owner {
				t.Errorf("%s: Observe owners = bucket %q user %q, want %q", tc.reason, obs.BucketOwner, obs.UserOwner, n.owner)
			}
		})
	}
}

// testVersioning checks a bucket made with Versioning: the server keeps
// every version, a repeated EnsureBucket (with or without Versioning)
// leaves it on, and a purging delete removes every version and delete
// marker, which a plain delete refuses.
func (s *suite) testVersioning(t *testing.T) {
	ctx := testContext(t)
	n := s.newNames(t)
	spec := driver.BucketSpec{Name: n.bucket, Owner: n.owner, Versioning: true}
	if s.cfg.NoVersioning {
		// Such a server may not list versions either.
		s.removeBucketAfter(t, n.bucket)
	} else {
		s.removeVersionedBucketAfter(t, n.bucket)
	}
	err := s.cfg.Driver.EnsureBucket(ctx, spec)
	if s.cfg.NoVersioning {
		wantErrorIs(t, "EnsureBucket(Versioning) on a server without versioning", err, driver.ErrInvalid)
		return
	}
	if err != nil {
		t.Fatalf("EnsureBucket(Versioning): %v", err)
	}
	s.wantVersioning(ctx, t, n.bucket)
	for _, body := range []string{"first", "second"} {
		if err := put(ctx, s.root, n.bucket, "data.txt", body); err != nil {
			t.Fatalf("root: put: %v", err)
		}
	}
	if got := s.versions(ctx, t, n.bucket); got != 2 {
		t.Fatalf("after two puts of one key the bucket holds %d versions and delete markers, want 2", got)
	}

	// Again, and then without Versioning: versioning stays on, no version
	// is lost, the current object is the last one put.
	if err := s.cfg.Driver.EnsureBucket(ctx, spec); err != nil {
		t.Fatalf("second EnsureBucket(Versioning): %v, want nil", err)
	}
	spec.Versioning = false
	if err := s.cfg.Driver.EnsureBucket(ctx, spec); err != nil {
		t.Fatalf("EnsureBucket without Versioning on a versioned bucket: %v, want nil", err)
	}
	s.wantVersioning(ctx, t, n.bucket)
	if got := s.versions(ctx, t, n.bucket); got != 2 {
		t.Errorf("after repeated EnsureBucket the bucket holds %d versions and delete markers, want 2", got)
	}
	s.wantObject(ctx, t, n.bucket, "data.txt", "second")

	// With the key deleted the bucket lists no objects, yet it holds two
	// versions and a delete marker: not empty.
	if err := del(ctx, s.root, n.bucket, "data.txt"); err != nil {
		t.Fatalf("root: delete data.txt: %v", err)
	}
	err = s.cfg.Driver.DeleteBucket(ctx, n.bucket, n.owner, false)
	wantErrorIs(t, "DeleteBucket(versions only, purge=false)", err, driver.ErrBucketNotEmpty)
	s.wantBucket(ctx, t, n.bucket, true)
	if err := s.cfg.Driver.DeleteBucket(ctx, n.bucket, n.owner, true); err != nil {
		t.Fatalf("DeleteBucket(versioned, purge=true): %v, want nil", err)
	}
	s.wantBucket(ctx, t, n.bucket, false)
}

func (s *suite) wantVersioning(ctx context.Context, t *testing.T, bucket string) {
	t.Helper()
	out, err := s.root.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: &bucket})
	if err != nil {
		t.Fatalf("root: get versioning of %q: %v", bucket, err)
	}
	if out.Status != s3types.BucketVersioningStatusEnabled {
		t.Errorf("root: versioning of %q = %q, want Enabled", bucket, out.Status)
	}
}

// versions counts the object versions and delete markers in bucket.
func (s *suite) versions(ctx context.Context, t *testing.T, bucket string) int {
	t.Helper()
	ids, err := listVersions(ctx, s.root, bucket)
	if err != nil {
		t.Fatalf("root: list object versions of %q: %v", bucket, err)
	}
	return len(ids)
}
