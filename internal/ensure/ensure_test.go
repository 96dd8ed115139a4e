package ensure_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	iamtypes "github.com/aws/aws-sdk-go-v2/service/iam/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/driver/s3iam"
	"github.com/bucketbroker/bucketbroker/internal/ensure"
	"github.com/bucketbroker/bucketbroker/internal/s3gateway"
	"github.com/bucketbroker/bucketbroker/internal/sdkhttp"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// One embedded S3 + IAM server for the package: versitygw runs one per
// process.
var (
	gw             *s3gateway.Server
	rootAK, rootSK string
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "ensure-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	rootAK, rootSK = "root"+randomHex(8), randomHex(20)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gw, err = s3gateway.Start(ctx, s3gateway.Config{DataDir: dir, RootAccessKey: rootAK, RootSecretKey: rootSK})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start embedded S3 server:", err)
		return 1
	}
	code := m.Run()
	if err := gw.Stop(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return code
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// backend is the driver under test and raw clients that make what the
// driver never would: an unmarked bucket or user, or another owner's.
type backend struct {
	d   driver.Driver
	s3  *s3.Client
	iam *iam.Client
}

func newBackend(t *testing.T) backend {
	t.Helper()
	d, err := s3iam.New(s3iam.Config{S3Endpoint: gw.S3Endpoint(), IAMEndpoint: gw.IAMEndpoint(), Region: gw.Region(),
		PathStyle: true, AccessKeyID: rootAK, SecretAccessKey: rootSK})
	if err != nil {
		t.Fatal(err)
	}
	creds := credentials.NewStaticCredentialsProvider(rootAK, rootSK, "")
	return backend{
		d:   d,
		s3:  s3.New(s3.Options{HTTPClient: sdkhttp.Client(nil), Region: gw.Region(), BaseEndpoint: aws.String(gw.S3Endpoint()), UsePathStyle: true, Credentials: creds}),
		iam: iam.New(iam.Options{HTTPClient: sdkhttp.Client(nil), Region: gw.Region(), BaseEndpoint: aws.String(gw.IAMEndpoint()), Credentials: creds}),
	}
}

var seq atomic.Int64

// names returns fresh names and the owner mark of "the caller".
func names() (bucket, user, owner string) {
	id := fmt.Sprintf("t%d-%s", seq.Add(1), randomHex(4))
	return driver.BucketName("ens", "instance", id), driver.UserName("ens", "binding", id), driver.OwnerMark("instance", id)
}

// otherOwner is a mark that is not the caller's.
var otherOwner = driver.OwnerMark("instance", "someone-else")

// What is under the name before the step.
type before int

const (
	missing  before = iota
	ours            // carries the caller's mark
	unmarked        // no mark: the caller's own only if it attempted it
	others          // another owner's mark
)

func (b backend) makeBucket(ctx context.Context, t *testing.T, name, owner string, what before) {
	t.Helper()
	t.Cleanup(func() { b.removeBucket(t, name) })
	var err error
	switch what {
	case ours:
		err = b.d.EnsureBucket(ctx, driver.BucketSpec{Name: name, Owner: owner})
	case others:
		err = b.d.EnsureBucket(ctx, driver.BucketSpec{Name: name, Owner: otherOwner})
	case unmarked:
		_, err = b.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &name})
	}
	if err != nil {
		t.Fatalf("make bucket %s: %v", name, err)
	}
}

// removeBucket deletes whatever bucket is left under name, marked or not.
func (b backend) removeBucket(t *testing.T, name string) {
	ctx := context.Background()
	_, err := b.s3.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &name})
	var nf *s3types.NoSuchBucket
	if err != nil && !errors.As(err, &nf) && errorCode(err) != "NoSuchBucket" {
		t.Logf("remove bucket %s: %v", name, err)
	}
}

func (b backend) makeUser(ctx context.Context, t *testing.T, name, owner string, what before) {
	t.Helper()
	t.Cleanup(func() { b.removeUser(t, name) })
	in := &iam.CreateUserInput{UserName: &name, Path: aws.String(s3iam.UserPath)}
	switch what {
	case missing:
		return
	case ours:
		in.Tags = []iamtypes.Tag{{Key: aws.String(s3iam.OwnerTagKey), Value: aws.String(owner)}}
	case others:
		in.Tags = []iamtypes.Tag{{Key: aws.String(s3iam.OwnerTagKey), Value: aws.String(otherOwner)}}
	}
	if _, err := b.iam.CreateUser(ctx, in); err != nil {
		t.Fatalf("make user %s: %v", name, err)
	}
}

// removeUser deletes whatever user is left under name, with its keys and
// policies: through the driver, as its owner, when it carries a mark.
func (b backend) removeUser(t *testing.T, name string) {
	ctx := context.Background()
	obs, err := b.d.Observe(ctx, driver.ObserveRequest{UserName: name})
	switch {
	case err != nil:
		t.Logf("remove user %s: %v", name, err)
	case obs.UserOwner != "":
		err = b.d.RevokeCredential(ctx, name, obs.UserOwner)
	case obs.UserExists:
		_, err = b.iam.DeleteUser(ctx, &iam.DeleteUserInput{UserName: &name}) // unmarked: no keys, no policy
	}
	if err != nil {
		t.Logf("remove user %s: %v", name, err)
	}
}

func errorCode(err error) string {
	var ae interface{ ErrorCode() string }
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// seen is what exists under the names after the step, as Observe says.
type seen struct {
	Exists bool
	Owner  string
}

func (b backend) bucketSeen(ctx context.Context, t *testing.T, name string) seen {
	t.Helper()
	obs, err := b.d.Observe(ctx, driver.ObserveRequest{Bucket: name})
	if err != nil {
		t.Fatalf("observe bucket %s: %v", name, err)
	}
	return seen{obs.BucketExists, obs.BucketOwner}
}

func (b backend) userSeen(ctx context.Context, t *testing.T, name string) seen {
	t.Helper()
	obs, err := b.d.Observe(ctx, driver.ObserveRequest{UserName: name})
	if err != nil {
		t.Fatalf("observe user %s: %v", name, err)
	}
	return seen{obs.UserExists, obs.UserOwner}
}

func TestLook(t *testing.T) {
	b := newBackend(t)
	cases := map[string]struct {
		reason string
		what   before
		want   func(owner string) ensure.Verdict
	}{
		"Missing": {
			reason: "A free name may be recorded as attempted.",
			what:   missing,
			want:   func(string) ensure.Verdict { return ensure.Verdict{BucketFree: true, UserFree: true} },
		},
		"Ours": {
			reason: "A name that already carries the caller's mark is its own: the attempt may be recorded.",
			what:   ours,
			want:   func(string) ensure.Verdict { return ensure.Verdict{BucketFree: true, UserFree: true} },
		},
		"Unmarked": {
			reason: "Before the first attempt, an unmarked resource is someone else's: never recorded.",
			what:   unmarked,
			want:   func(string) ensure.Verdict { return ensure.Verdict{} },
		},
		"OtherOwner": {
			reason: "Another owner's mark is taken, and the verdict names it.",
			what:   others,
			want: func(string) ensure.Verdict {
				return ensure.Verdict{BucketOwner: otherOwner, UserOwner: otherOwner}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			bucket, user, owner := names()
			b.makeBucket(ctx, t, bucket, owner, tc.what)
			b.makeUser(ctx, t, user, owner, tc.what)
			got, err := ensure.Look(ctx, b.d, ensure.Names{Bucket: bucket, User: user, Owner: owner})
			if err != nil {
				t.Fatalf("Look: %v", err)
			}
			if diff := cmp.Diff(tc.want(owner), got); diff != "" {
				t.Errorf("%s\nLook: -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestLookOnlyAsked(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	got, err := ensure.Look(ctx, failingDriver{}, ensure.Names{Owner: "x"})
	if err != nil || got != (ensure.Verdict{}) {
		t.Errorf("Look with no names = %+v, %v; want no call and nothing free", got, err)
	}
	bucket, _, owner := names()
	got, err = ensure.Look(ctx, b.d, ensure.Names{Bucket: bucket, Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	if want := (ensure.Verdict{BucketFree: true}); got != want {
		t.Errorf("Look of a bucket alone = %+v, want %+v: a name not asked about is not free", got, want)
	}
}

// failingDriver fails every call: Look with no names must make none.
type failingDriver struct{ driver.Driver }

func (failingDriver) Observe(context.Context, driver.ObserveRequest) (driver.Observation, error) {
	return driver.Observation{}, errors.New("called")
}

// ownership is the table every ensure step is checked against: what is
// under the name, whether the caller's record holds the attempt, and what
// the step must answer and leave.
type ownership struct {
	reason   string
	what     before
	creation ensure.Creation
	wantErr  error // nil, or the sentinel the error wraps
	// What is left under the name: for a delete step, nothing unless it
	// fails; else a resource marked by wantOwner, or by the caller when
	// wantMine.
	wantOwner string
	wantMine  bool
}

// want is what must be left under the name, the caller's mark being owner.
func (tc ownership) want(owner string, deletes bool) seen {
	switch {
	case deletes && tc.wantErr == nil:
		return seen{}
	case tc.wantMine:
		return seen{Exists: true, Owner: owner}
	}
	return seen{Exists: true, Owner: tc.wantOwner}
}

func deleteCases() map[string]ownership {
	return map[string]ownership{
		"MissingIsSuccess": {
			reason: "A missing resource is success, attempted or not.", what: missing,
		},
		"MissingIsSuccessAttempted": {
			reason: "A missing resource is success, attempted or not.", what: missing, creation: ensure.Unconfirmed,
		},
		"Ours": {
			reason: "A resource with the caller's mark is deleted.", what: ours,
		},
		"UnmarkedAttemptedIsAdopted": {
			reason: "Refused as not ours with the attempt recorded: ours, left unmarked by a crash; marked, then deleted.",
			what:   unmarked, creation: ensure.Unconfirmed,
		},
		"UnmarkedNotAttemptedIsRefused": {
			reason: "No mark and no attempt recorded: someone else's, never deleted or marked.",
			what:   unmarked, wantErr: driver.ErrOwnedByOther, wantOwner: "",
		},
		"OtherOwnerIsNeverDeleted": {
			reason: "Another owner's mark is never deleted, not even with the attempt recorded.",
			what:   others, creation: ensure.Unconfirmed, wantErr: driver.ErrOwnedByOther, wantOwner: otherOwner,
		},
		"MissingIsSuccessCreated": {
			reason: "A missing resource is success, also once the record says it was created.", what: missing, creation: ensure.Created,
		},
		"OursCreated": {
			reason: "A resource with the caller's mark is deleted.", what: ours, creation: ensure.Created,
		},
		"UnmarkedCreatedIsMarkLost": {
			reason: "The record says it was created and marked: a missing mark was removed by someone, and nothing is marked or deleted.",
			what:   unmarked, creation: ensure.Created, wantErr: ensure.ErrMarkLost, wantOwner: "",
		},
		"OtherOwnerCreatedIsMarkLost": {
			reason: "The record says it was created and marked: another owner's mark replaced it, and nothing is deleted.",
			what:   others, creation: ensure.Created, wantErr: ensure.ErrMarkLost, wantOwner: otherOwner,
		},
	}
}

// step is one ensure step under test, on a bucket or on a user, with the
// caller's names.
type step func(ctx context.Context, d driver.Driver, bucket, user, owner string, c ensure.Creation) error

// resource is what a step works on: the bucket, or the user (whose policy
// names a bucket of the caller's).
type resource int

const (
	aBucket resource = iota
	aUser
)

// runSteps runs step on each case's resource and checks its answer and
// what it left; deletes says whether success leaves nothing.
func runSteps(t *testing.T, on resource, cases map[string]ownership, deletes bool, do step) {
	b := newBackend(t)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			bucket, user, owner := names()
			look := b.bucketSeen
			if on == aBucket {
				b.makeBucket(ctx, t, bucket, owner, tc.what)
			} else {
				b.makeBucket(ctx, t, bucket, owner, ours)
				b.makeUser(ctx, t, user, owner, tc.what)
				look = func(ctx context.Context, t *testing.T, _ string) seen { return b.userSeen(ctx, t, user) }
			}
			checkErr(t, tc, do(ctx, b.d, bucket, user, owner, tc.creation))
			if diff := cmp.Diff(tc.want(owner, deletes), look(ctx, t, bucket)); diff != "" {
				t.Errorf("%s\nleft after the step: -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestDeleteBucket(t *testing.T) {
	runSteps(t, aBucket, deleteCases(), true, func(ctx context.Context, d driver.Driver, bucket, _, owner string, c ensure.Creation) error {
		return ensure.DeleteBucket(ctx, d, bucket, owner, false, c)
	})
}

func TestRevokeUser(t *testing.T) {
	runSteps(t, aUser, deleteCases(), true, func(ctx context.Context, d driver.Driver, bucket, user, owner string, c ensure.Creation) error {
		return ensure.RevokeUser(ctx, d, user, owner, bucket, c)
	})
}

func ensureCases() map[string]ownership {
	return map[string]ownership{
		"MissingIsCreated": {
			reason: "A missing resource is created, marked.", what: missing, creation: ensure.Unconfirmed, wantMine: true,
		},
		"OursIsKept": {
			reason: "A resource with the caller's mark is the caller's.", what: ours, wantMine: true,
		},
		"UnmarkedAttemptedIsAdopted": {
			reason: "With the attempt recorded, an unmarked resource is the caller's own: marked.",
			what:   unmarked, creation: ensure.Unconfirmed, wantMine: true,
		},
		"UnmarkedNotAttemptedIsRefused": {
			reason: "Without the attempt, an unmarked resource is someone else's: refused, left unmarked.",
			what:   unmarked, wantErr: driver.ErrOwnedByOther, wantOwner: "",
		},
		"OtherOwnerIsNeverAdopted": {
			reason: "Another owner's mark is never adopted, not even with the attempt recorded.",
			what:   others, creation: ensure.Unconfirmed, wantErr: driver.ErrOwnedByOther, wantOwner: otherOwner,
		},
		"OursCreatedIsKept": {
			reason: "A resource with the caller's mark is the caller's.", what: ours, creation: ensure.Created, wantMine: true,
		},
		"UnmarkedCreatedIsMarkLost": {
			reason: "The record says it was created and marked: an unmarked one is someone's change, never adopted.",
			what:   unmarked, creation: ensure.Created, wantErr: ensure.ErrMarkLost, wantOwner: "",
		},
		"OtherOwnerCreatedIsMarkLost": {
			reason: "The record says it was created and marked: another owner's mark is someone's change, never adopted.",
			what:   others, creation: ensure.Created, wantErr: ensure.ErrMarkLost, wantOwner: otherOwner,
		},
	}
}

func TestBucket(t *testing.T) {
	runSteps(t, aBucket, ensureCases(), false, func(ctx context.Context, d driver.Driver, bucket, _, owner string, c ensure.Creation) error {
		return ensure.Bucket(ctx, d, driver.BucketSpec{Name: bucket, Owner: owner}, c)
	})
}

// TestBucketOtherEvidence: spec.AdoptUnmarked is durable evidence other
// than the attempt (an old provisioner's generated name), and is kept.
func TestBucketOtherEvidence(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	bucket, _, owner := names()
	b.makeBucket(ctx, t, bucket, owner, unmarked)
	if err := ensure.Bucket(ctx, b.d, driver.BucketSpec{Name: bucket, Owner: owner, AdoptUnmarked: true}, ensure.NotAttempted); err != nil {
		t.Fatalf("Bucket with spec.AdoptUnmarked: %v", err)
	}
	if got, want := b.bucketSeen(ctx, t, bucket), (seen{Exists: true, Owner: owner}); got != want {
		t.Errorf("bucket = %+v, want %+v", got, want)
	}
}

// TestBucketOtherEvidenceNotOnceCreated: the other evidence is of a
// creation the record has not confirmed; once it says Created, a missing
// mark was removed by someone, and the evidence adopts nothing.
func TestBucketOtherEvidenceNotOnceCreated(t *testing.T) {
	b := newBackend(t)
	ctx := context.Background()
	bucket, _, owner := names()
	b.makeBucket(ctx, t, bucket, owner, unmarked)
	err := ensure.Bucket(ctx, b.d, driver.BucketSpec{Name: bucket, Owner: owner, AdoptUnmarked: true}, ensure.Created)
	if !errors.Is(err, ensure.ErrMarkLost) || !strings.Contains(err.Error(), bucket) {
		t.Errorf("Bucket with spec.AdoptUnmarked, Created = %v; want ErrMarkLost naming %s", err, bucket)
	}
	if got, want := b.bucketSeen(ctx, t, bucket), (seen{Exists: true}); got != want {
		t.Errorf("bucket = %+v, want %+v (left unmarked)", got, want)
	}
}

func TestCredential(t *testing.T) {
	runSteps(t, aUser, ensureCases(), false, func(ctx context.Context, d driver.Driver, bucket, user, owner string, c ensure.Creation) error {
		cred, err := ensure.Credential(ctx, d, driver.CredentialSpec{
			UserName: user, Owner: owner, Bucket: bucket, Access: driver.AccessReadWrite,
		}, c)
		if err == nil && (cred.AccessKeyID == "" || cred.SecretAccessKey == "") {
			return errors.New("no key made")
		}
		return err
	})
}

func checkErr(t *testing.T, tc ownership, err error) {
	t.Helper()
	switch {
	case tc.wantErr == nil && err != nil:
		t.Fatalf("%s\nerror = %v, want none", tc.reason, err)
	case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
		t.Fatalf("%s\nerror = %v, want %v", tc.reason, err, tc.wantErr)
	}
}

// TestUserLookNeeded: the look at a user name is needed until the driver
// knows the backend marks a new user in the same write (a driver that
// cannot say is taken not to), and once it is not, Credential and
// RevokeUser without the attempt keep the rule the look kept: a missing
// user is created, the caller's own adopted, an unmarked or another
// owner's refused and left as it was.
func TestUserLookNeeded(t *testing.T) {
	ctx := context.Background()
	b := newBackend(t)
	if !ensure.UserLookNeeded(struct{ driver.Driver }{b.d}) {
		t.Error("UserLookNeeded of a driver without AtomicUserMarks = false, want true")
	}
	if !ensure.UserLookNeeded(b.d) {
		t.Error("UserLookNeeded before the driver made any user = false, want true (not known yet)")
	}
	for _, what := range []before{missing, ours, unmarked, others} {
		bucket, user, owner := names()
		b.makeUser(ctx, t, user, owner, what)
		prior := b.userSeen(ctx, t, user)
		_, err := ensure.Credential(ctx, b.d, driver.CredentialSpec{UserName: user, Owner: owner, Bucket: bucket, Access: driver.AccessReadOnly}, ensure.NotAttempted)
		after := b.userSeen(ctx, t, user)
		switch what {
		case missing, ours:
			if err != nil || after.Owner != owner {
				t.Errorf("before %d: Credential = %v, user owner %q after, want success and the caller's mark", what, err, after.Owner)
			}
		default:
			if !errors.Is(err, driver.ErrOwnedByOther) || after != prior {
				t.Errorf("before %d: Credential = %v, user %+v after (%+v before), want ErrOwnedByOther and no change", what, err, after, prior)
			}
			if err := ensure.RevokeUser(ctx, b.d, user, owner, bucket, ensure.NotAttempted); !errors.Is(err, driver.ErrOwnedByOther) || b.userSeen(ctx, t, user) != prior {
				t.Errorf("before %d: RevokeUser = %v, want ErrOwnedByOther and the user left", what, err)
			}
		}
		if what == missing && ensure.UserLookNeeded(b.d) {
			t.Error("UserLookNeeded after the embedded server kept a new user's mark in CreateUser = true, want false")
		}
	}
}
