package adminapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/bucketbroker/bucketbroker/internal/driver/minio/miniotest"
)

// liveConfig is the configuration of the MinIO server the environment
// names, as its root user (miniotest.FromEnv: it skips or fails the test
// without one).
func liveConfig(t *testing.T) Config {
	t.Helper()
	srv := miniotest.FromEnv(t)
	return Config{Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}
}

func newClient(t *testing.T, cfg Config) *Client {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func s3Client(endpoint, access, secret string) *s3.Client {
	return s3.New(s3.Options{
		Region:       defaultRegion,
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(access, secret, ""),
		// Only the retries of the test's own calls: a refusal is the answer.
		RetryMaxAttempts: 1,
	})
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// errorCode is the S3 error code of err, "" if it has none.
func errorCode(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}

// put writes one object with s3c and returns the S3 error code ("" on
// success).
func put(t *testing.T, s3c *s3.Client, bucket string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: aws.String("k"), Body: strings.NewReader("x")})
	if err != nil && errorCode(err) == "" {
		t.Fatalf("PutObject %s: %v", bucket, err)
	}
	return errorCode(err)
}

// bucketPolicy is an IAM policy document allowing object reads and writes
// in bucket alone. Its statement's Sid names the bucket, with characters
// AWS would not take there: MinIO keeps any text (a place for a mark).
func bucketPolicy(bucket string) []byte {
	return fmt.Appendf(nil, `{"Version":"2012-10-17","Statement":[{"Sid":"bucketbroker.io/test=%s","Effect":"Allow",`+
		`"Action":["s3:GetObject","s3:PutObject","s3:DeleteObject","s3:ListBucket"],`+
		`"Resource":["arn:aws:s3:::%s","arn:aws:s3:::%s/*"]}]}`, bucket, bucket, bucket)
}

// makeBuckets creates the buckets with the root keys and deletes them,
// emptied, when the test ends.
func makeBuckets(t *testing.T, root *s3.Client, buckets ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, b := range buckets {
		if _, err := root.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b)}); err != nil {
			t.Fatalf("CreateBucket %s: %v", b, err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := root.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(b)})
			if err != nil {
				t.Errorf("cleanup: ListObjectsV2 %s: %v", b, err)
				return
			}
			for _, o := range out.Contents { // the tests put a few objects, one page
				if _, err := root.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b), Key: o.Key}); err != nil {
					t.Errorf("cleanup: DeleteObject %s/%s: %v", b, aws.ToString(o.Key), err)
				}
			}
			if _, err := root.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: aws.String(b)}); err != nil {
				t.Errorf("cleanup: DeleteBucket %s: %v", b, err)
			}
		})
	}
}

// TestServerUserLifecycle drives one user through the admin API and checks
// each step by what its key can do over S3: a new user's key signs (and is
// allowed nothing), a canned policy attached scopes it to one bucket, a new
// secret key replaces the old one, and removing the user stops its key.
func TestServerUserLifecycle(t *testing.T) {
	cfg := liveConfig(t)
	admin := newClient(t, cfg)
	root := s3Client(cfg.Endpoint, cfg.AccessKey, cfg.SecretKey)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	id := randomHex(6)
	own, other := "bbmadm-own-"+id, "bbmadm-other-"+id
	user, secret := "bbu"+id, randomHex(16)
	policy := "bbpol-" + id
	makeBuckets(t, root, own, other)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := admin.RemoveUser(ctx, user); err != nil && !errors.Is(err, ErrNoSuchUser) {
			t.Errorf("cleanup: RemoveUser: %v", err)
		}
		if err := admin.RemoveCannedPolicy(ctx, policy); err != nil && !errors.Is(err, ErrNoSuchPolicy) {
			t.Errorf("cleanup: RemoveCannedPolicy: %v", err)
		}
	})

	// A new user: its key is known to the server (AccessDenied, not
	// InvalidAccessKeyId or SignatureDoesNotMatch), and allowed nothing.
	if err := admin.AddUser(ctx, user, secret); err != nil {
		t.Fatalf("AddUser: %v", err)
	}
	info, err := admin.UserInfo(ctx, user)
	if err != nil {
		t.Fatalf("UserInfo: %v", err)
	}
	if !info.Enabled || len(info.Policies) != 0 {
		t.Errorf("UserInfo of a new user: %+v, want enabled, no policies", info)
	}
	userS3 := s3Client(cfg.Endpoint, user, secret)
	if code := put(t, userS3, own); code != "AccessDenied" {
		t.Errorf("new user without a policy: PutObject got %q, want AccessDenied", code)
	}

	// A policy scoped to one bucket: writes there pass, elsewhere not.
	if err := admin.AddCannedPolicy(ctx, policy, bucketPolicy(own)); err != nil {
		t.Fatalf("AddCannedPolicy: %v", err)
	}
	attached, err := admin.AttachPolicy(ctx, user, policy)
	if err != nil {
		t.Fatalf("AttachPolicy: %v", err)
	}
	if !slices.Equal(attached, []string{policy}) {
		t.Errorf("AttachPolicy returned %q, want [%s]", attached, policy)
	}
	if code := put(t, userS3, own); code != "" {
		t.Errorf("user with the policy of its bucket: PutObject %s got %q, want success", own, code)
	}
	if code := put(t, userS3, other); code != "AccessDenied" {
		t.Errorf("user with the policy of its bucket: PutObject %s got %q, want AccessDenied", other, code)
	}
	if _, err := admin.AttachPolicy(ctx, user, policy); !errors.Is(err, ErrPolicyChangeAlreadyApplied) {
		t.Errorf("AttachPolicy again: got %v, want ErrPolicyChangeAlreadyApplied", err)
	}

	// What the server keeps, read back: the user's policy (user-info and
	// the encrypted list-users answer) and the policy's document.
	info, err = admin.UserInfo(ctx, user)
	if err != nil {
		t.Fatalf("UserInfo: %v", err)
	}
	if !slices.Equal(info.Policies, []string{policy}) {
		t.Errorf("UserInfo policies %q, want [%s]", info.Policies, policy)
	}
	users, err := admin.ListUsers(ctx)
	if err != nil {
		t.Fatalf("ListUsers: %v", err)
	}
	if got, ok := users[user]; !ok || !got.Enabled || !slices.Equal(got.Policies, []string{policy}) {
		t.Errorf("ListUsers[%s] = %+v (listed: %t), want enabled with [%s]", user, got, ok, policy)
	}
	doc, err := admin.CannedPolicy(ctx, policy)
	if err != nil {
		t.Fatalf("CannedPolicy: %v", err)
	}
	// The server keeps actions and resources as sets: they come back in
	// any order.
	type policyDoc struct {
		Version   string
		Statement []struct {
			Sid, Effect      string
			Action, Resource []string
		}
	}
	var gotDoc, wantDoc policyDoc
	if err := json.Unmarshal(doc, &gotDoc); err != nil {
		t.Fatalf("CannedPolicy answer %q: %v", doc, err)
	}
	if err := json.Unmarshal(bucketPolicy(own), &wantDoc); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantDoc, gotDoc, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("CannedPolicy document (-sent +read back):\n%s", diff)
	}

	// Detached, the policy no longer applies.
	detached, err := admin.DetachPolicy(ctx, user, policy)
	if err != nil {
		t.Fatalf("DetachPolicy: %v", err)
	}
	if !slices.Equal(detached, []string{policy}) {
		t.Errorf("DetachPolicy returned %q, want [%s]", detached, policy)
	}
	if code := put(t, userS3, own); code != "AccessDenied" {
		t.Errorf("policy detached: PutObject got %q, want AccessDenied", code)
	}
	if _, err := admin.AttachPolicy(ctx, user, policy); err != nil {
		t.Fatalf("AttachPolicy after detach: %v", err)
	}

	// AddUser on an existing user replaces its secret key and keeps its
	// policy.
	newSecret := randomHex(16)
	if err := admin.AddUser(ctx, user, newSecret); err != nil {
		t.Fatalf("AddUser with a new secret: %v", err)
	}
	if code := put(t, userS3, own); code != "SignatureDoesNotMatch" {
		t.Errorf("old secret key after AddUser with a new one: PutObject got %q, want SignatureDoesNotMatch", code)
	}
	userS3 = s3Client(cfg.Endpoint, user, newSecret)
	if code := put(t, userS3, own); code != "" {
		t.Errorf("new secret key: PutObject got %q, want success (the policy kept)", code)
	}

	// Removed, the user's key stops at once, and the user is gone.
	if err := admin.RemoveUser(ctx, user); err != nil {
		t.Fatalf("RemoveUser: %v", err)
	}
	if code := put(t, userS3, own); code != "InvalidAccessKeyId" {
		t.Errorf("removed user: PutObject got %q, want InvalidAccessKeyId", code)
	}
	if _, err := admin.UserInfo(ctx, user); !errors.Is(err, ErrNoSuchUser) {
		t.Errorf("UserInfo of a removed user: got %v, want ErrNoSuchUser", err)
	}
	if err := admin.RemoveUser(ctx, user); !errors.Is(err, ErrNoSuchUser) {
		t.Errorf("RemoveUser again: got %v, want ErrNoSuchUser", err)
	}
	users, err = admin.ListUsers(ctx)
	if err != nil {
		t.Fatalf("ListUsers: %v", err)
	}
	if _, ok := users[user]; ok {
		t.Errorf("ListUsers still lists the removed user %s", user)
	}

	if err := admin.RemoveCannedPolicy(ctx, policy); err != nil {
		t.Fatalf("RemoveCannedPolicy: %v", err)
	}
	if _, err := admin.CannedPolicy(ctx, policy); !errors.Is(err, ErrNoSuchPolicy) {
		t.Errorf("CannedPolicy of a removed policy: got %v, want ErrNoSuchPolicy", err)
	}
	if err := admin.RemoveCannedPolicy(ctx, policy); err != nil {
		t.Errorf("RemoveCannedPolicy of a missing policy: %v, want success", err)
	}
}

// TestServerRefusals checks that a call the server refuses returns an error
// that says why, names no secret, and changes nothing.
func TestServerRefusals(t *testing.T) {
	cfg := liveConfig(t)
	admin := newClient(t, cfg)
	id := randomHex(6)
	// user is never created (the cases that would create it must not);
	// policyUser is, to have a policy attached.
	user, policyUser, secret := "bbu"+id, "bbp"+id, randomHex(16)
	policy := "bbpol-" + id
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, u := range []string{user, policyUser} {
			if err := admin.RemoveUser(ctx, u); err != nil && !errors.Is(err, ErrNoSuchUser) {
				t.Errorf("cleanup: RemoveUser %s: %v", u, err)
			}
		}
		if err := admin.RemoveCannedPolicy(ctx, policy); err != nil && !errors.Is(err, ErrNoSuchPolicy) {
			t.Errorf("cleanup: RemoveCannedPolicy: %v", err)
		}
	})
	wrongSecret, unknownKey := cfg, cfg
	wrongSecret.SecretKey = "wrong" + cfg.SecretKey
	unknownKey.AccessKey = "nobody" + id

	tests := map[string]struct {
		reason string
		cfg    Config
		call   func(context.Context, *Client) error
		// wantIs is the sentinel the error must match (nil: none), want
		// strings its text must contain.
		wantIs error
		want   []string
		// absent, if set, checks that the call left nothing behind.
		absent func(context.Context) error
	}{
		"WrongSecretListUsers": {
			reason: "a wrong admin secret key must be named as rejected credentials",
			cfg:    wrongSecret,
			call:   func(ctx context.Context, c *Client) error { _, err := c.ListUsers(ctx); return err },
			wantIs: ErrCredentialsRejected,
			want:   []string{"minio admin list-users: credentials rejected: SignatureDoesNotMatch (HTTP 403)"},
		},
		"WrongSecretAddUser": {
			reason: "an add-user signed and encrypted with a wrong secret key must be refused and create no user",
			cfg:    wrongSecret,
			call:   func(ctx context.Context, c *Client) error { return c.AddUser(ctx, user, secret) },
			wantIs: ErrCredentialsRejected,
			want:   []string{"minio admin add-user: credentials rejected: SignatureDoesNotMatch (HTTP 403)"},
			absent: func(ctx context.Context) error { _, err := admin.UserInfo(ctx, user); return err },
		},
		"UnknownAccessKey": {
			reason: "an access key the server does not know must be named as rejected credentials",
			cfg:    unknownKey,
			call:   func(ctx context.Context, c *Client) error { _, err := c.UserInfo(ctx, user); return err },
			wantIs: ErrCredentialsRejected,
			want:   []string{"credentials rejected: InvalidAccessKeyId (HTTP 403)"},
		},
		"ShortSecretKey": {
			reason: "a secret key shorter than MinIO's 8 characters must be refused and create no user",
			cfg:    cfg,
			call:   func(ctx context.Context, c *Client) error { return c.AddUser(ctx, user, "short") },
			want:   []string{"minio admin add-user: ", "(HTTP 400)"},
			absent: func(ctx context.Context) error { _, err := admin.UserInfo(ctx, user); return err },
		},
		"MalformedPolicy": {
			reason: "a policy document that is not JSON must be refused and create no policy",
			cfg:    cfg,
			call: func(ctx context.Context, c *Client) error {
				return c.AddCannedPolicy(ctx, policy, []byte(`{"Version":"2012-10-17","Statement":[`))
			},
			want:   []string{"minio admin add-canned-policy: ", "(HTTP 400)"},
			absent: func(ctx context.Context) error { _, err := admin.CannedPolicy(ctx, policy); return err },
		},
		"AttachToMissingUser": {
			reason: "attaching to a user that does not exist must say so",
			cfg:    cfg,
			call: func(ctx context.Context, c *Client) error {
				_, err := c.AttachPolicy(ctx, user, "readonly")
				return err
			},
			wantIs: ErrNoSuchUser,
			want:   []string{"minio admin idp/builtin/policy/attach: XMinioAdminNoSuchUser (HTTP 404)"},
		},
		"AttachMissingPolicy": {
			reason: "attaching a policy that does not exist must say so",
			cfg:    cfg,
			call: func(ctx context.Context, c *Client) error {
				if err := c.AddUser(ctx, policyUser, secret); err != nil {
					return fmt.Errorf("AddUser first: %w", err)
				}
				_, err := c.AttachPolicy(ctx, policyUser, policy)
				return err
			},
			wantIs: ErrNoSuchPolicy,
			want:   []string{"minio admin idp/builtin/policy/attach: XMinioAdminNoSuchPolicy (HTTP 404)"},
		},
		"Unreachable": {
			reason: "a closed port must be named as refused",
			cfg:    Config{Endpoint: "http://" + closedAddr(t), AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey},
			call:   func(ctx context.Context, c *Client) error { _, err := c.ListUsers(ctx); return err },
			want:   []string{"minio admin list-users: ", "connection refused"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			err := tc.call(ctx, newClient(t, tc.cfg))
			if err == nil {
				t.Fatalf("%s\ngot no error", tc.reason)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("%s\nerror %q does not match %q", tc.reason, err, tc.wantIs)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s\nerror %q does not contain %q", tc.reason, err, w)
				}
			}
			for _, s := range []string{cfg.SecretKey, secret} {
				if strings.Contains(err.Error(), s) {
					t.Errorf("the error names a secret key: %q", err)
				}
			}
			if tc.absent != nil {
				if err := tc.absent(ctx); !errors.Is(err, ErrNoSuchUser) && !errors.Is(err, ErrNoSuchPolicy) {
					t.Errorf("%s\nafter the refused call the look at what it would have made got %v, want it missing", tc.reason, err)
				}
			}
		})
	}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestServerBucketQuota sets, changes and clears a bucket's hard size quota
// and checks each by what a write of an object of a given size gets.
func TestServerBucketQuota(t *testing.T) {
	cfg := liveConfig(t)
	admin := newClient(t, cfg)
	root := s3Client(cfg.Endpoint, cfg.AccessKey, cfg.SecretKey)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bucket := "bbmadm-quota-" + randomHex(6)
	makeBuckets(t, root, bucket)
	// Writes ask first (Expect: 100-continue). The server may still
	// refuse one past the quota while its body is being sent and close
	// the connection: the client then sees a reset or broken pipe, not
	// the answer. Such a write counts as refused when the object is not
	// there afterwards; each write has a key of its own for that check.
	root = s3.New(root.Options(), func(o *s3.Options) { o.ContinueHeaderThresholdBytes = 1 })

	const mib = 1 << 20
	const refusedUnread = "(refused: connection closed before the answer was read)"
	puts := 0
	putSize := func(size int) string {
		t.Helper()
		puts++
		key := fmt.Sprintf("k%d", puts)
		_, err := root.PutObject(ctx, &s3.PutObjectInput{
			Bucket: &bucket, Key: &key,
			Body: strings.NewReader(strings.Repeat("x", size)), ContentLength: aws.Int64(int64(size)),
		})
		if err == nil || errorCode(err) != "" {
			return errorCode(err)
		}
		if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("PutObject %d bytes: %v", size, err)
		}
		if _, herr := root.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &key}); errorCode(herr) != "NotFound" {
			t.Fatalf("PutObject %d bytes: %v; then HeadObject: %v, want NotFound", size, err, herr)
		}
		return refusedUnread
	}
	quota := func() uint64 {
		t.Helper()
		q, err := admin.BucketQuota(ctx, bucket)
		if err != nil {
			t.Fatalf("BucketQuota: %v", err)
		}
		return q
	}

	if q := quota(); q != 0 {
		t.Errorf("BucketQuota of a new bucket: %d, want 0", q)
	}
	if err := admin.SetBucketQuota(ctx, bucket, mib); err != nil {
		t.Fatalf("SetBucketQuota 1 MiB: %v", err)
	}
	if q := quota(); q != mib {
		t.Errorf("BucketQuota: %d, want %d", q, mib)
	}
	if code := putSize(2 * mib); code != "XMinioAdminBucketQuotaExceeded" && code != refusedUnread {
		t.Errorf("2 MiB object under a 1 MiB quota: PutObject got %q, want XMinioAdminBucketQuotaExceeded", code)
	}
	if code := putSize(mib / 2); code != "" {
		t.Errorf("0.5 MiB object under a 1 MiB quota: PutObject got %q, want success", code)
	}

	// A larger limit applies at once.
	if err := admin.SetBucketQuota(ctx, bucket, 4*mib); err != nil {
		t.Fatalf("SetBucketQuota 4 MiB: %v", err)
	}
	if q := quota(); q != 4*mib {
		t.Errorf("BucketQuota: %d, want %d", q, 4*mib)
	}
	if code := putSize(2 * mib); code != "" {
		t.Errorf("2 MiB object under a 4 MiB quota: PutObject got %q, want success", code)
	}

	// Cleared, no limit.
	if err := admin.SetBucketQuota(ctx, bucket, 0); err != nil {
		t.Fatalf("SetBucketQuota 0: %v", err)
	}
	if q := quota(); q != 0 {
		t.Errorf("BucketQuota after clearing: %d, want 0", q)
	}
	if code := putSize(5 * mib); code != "" {
		t.Errorf("5 MiB object without a quota: PutObject got %q, want success", code)
	}

	missing := "bbmadm-missing-" + randomHex(6)
	var apiErr *Error
	if err := admin.SetBucketQuota(ctx, missing, mib); !errors.As(err, &apiErr) || apiErr.Code != "NoSuchBucket" {
		t.Errorf("SetBucketQuota of a missing bucket: got %v, want code NoSuchBucket", err)
	}
	if _, err := admin.BucketQuota(ctx, missing); !errors.As(err, &apiErr) || apiErr.Code != "NoSuchBucket" {
		t.Errorf("BucketQuota of a missing bucket: got %v, want code NoSuchBucket", err)
	}
}

// TestServerSelfServiceKeys shows what a user may do to its own keys
// through the admin API, which a policy that allows only S3 actions does
// not stop: MinIO checks a user's calls about itself against explicit
// Deny statements only. Such a user can mint a service account (a second
// key with its rights, which a new secret key for the user leaves alive)
// and set its own secret key. A Deny of admin:CreateServiceAccount and
// admin:CreateUser stops both; removing the user stops the keys it minted.
func TestServerSelfServiceKeys(t *testing.T) {
	cfg := liveConfig(t)
	admin := newClient(t, cfg)
	root := s3Client(cfg.Endpoint, cfg.AccessKey, cfg.SecretKey)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	id := randomHex(6)
	own := "bbmadm-self-" + id
	user, secret := "bbs"+id, randomHex(16)
	policy := "bbpol-self-" + id
	makeBuckets(t, root, own)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := admin.RemoveUser(ctx, user); err != nil && !errors.Is(err, ErrNoSuchUser) {
			t.Errorf("cleanup: RemoveUser: %v", err)
		}
		if err := admin.RemoveCannedPolicy(ctx, policy); err != nil {
			t.Errorf("cleanup: RemoveCannedPolicy: %v", err)
		}
	})
	if err := admin.AddUser(ctx, user, secret); err != nil {
		t.Fatalf("AddUser: %v", err)
	}
	if err := admin.AddCannedPolicy(ctx, policy, bucketPolicy(own)); err != nil {
		t.Fatalf("AddCannedPolicy: %v", err)
	}
	if _, err := admin.AttachPolicy(ctx, user, policy); err != nil {
		t.Fatalf("AttachPolicy: %v", err)
	}

	// The user's own admin client, and the service account call (which
	// this package does not offer: a driver has no use for it).
	self := newClient(t, Config{Endpoint: cfg.Endpoint, AccessKey: user, SecretKey: secret})
	mint := func(access, secret string) error {
		body, err := json.Marshal(map[string]string{"accessKey": access, "secretKey": secret})
		if err != nil {
			t.Fatal(err)
		}
		_, err = self.do(ctx, call{method: http.MethodPut, op: "add-service-account", body: body, encryptBody: true, decryptAnswer: true})
		return err
	}

	minted, mintedSecret := "bbsa"+id, randomHex(16)
	if err := mint(minted, mintedSecret); err != nil {
		t.Fatalf("a user with an S3-only policy mints a service account for itself: %v, want success (MinIO allows it)", err)
	}
	mintedS3 := s3Client(cfg.Endpoint, minted, mintedSecret)
	if code := put(t, mintedS3, own); code != "" {
		t.Errorf("minted service account: PutObject got %q, want success (it has the user's rights)", code)
	}
	if err := admin.AddUser(ctx, user, randomHex(16)); err != nil {
		t.Fatalf("AddUser with a new secret: %v", err)
	}
	if code := put(t, mintedS3, own); code != "" {
		t.Errorf("minted service account after the user's new secret key: PutObject got %q, want success (MinIO keeps it)", code)
	}
	secret = randomHex(16)
	if err := admin.AddUser(ctx, user, secret); err != nil {
		t.Fatalf("AddUser with a known secret: %v", err)
	}
	self = newClient(t, Config{Endpoint: cfg.Endpoint, AccessKey: user, SecretKey: secret})
	if err := self.AddUser(ctx, user, randomHex(16)); err != nil {
		t.Errorf("a user with an S3-only policy sets its own secret key: %v, want success (MinIO allows it)", err)
	}

	// The same policy with a Deny of both: refused.
	denying := bytes.Replace(bucketPolicy(own), []byte(`"Statement":[`),
		[]byte(`"Statement":[{"Effect":"Deny","Action":["admin:CreateServiceAccount","admin:CreateUser"]},`), 1)
	if err := admin.AddCannedPolicy(ctx, policy, denying); err != nil {
		t.Fatalf("AddCannedPolicy with the Deny: %v", err)
	}
	secret = randomHex(16)
	if err := admin.AddUser(ctx, user, secret); err != nil {
		t.Fatalf("AddUser with a known secret: %v", err)
	}
	self = newClient(t, Config{Endpoint: cfg.Endpoint, AccessKey: user, SecretKey: secret})
	var apiErr *Error
	if err := mint("bbsb"+id, randomHex(16)); !errors.As(err, &apiErr) || apiErr.Code != "AccessDenied" {
		t.Errorf("mint under the Deny: got %v, want AccessDenied", err)
	}
	if err := self.AddUser(ctx, user, randomHex(16)); !errors.As(err, &apiErr) || apiErr.Code != "AccessDenied" {
		t.Errorf("own secret key under the Deny: got %v, want AccessDenied", err)
	}
	if code := put(t, s3Client(cfg.Endpoint, user, secret), own); code != "" {
		t.Errorf("user under the Deny: PutObject got %q, want success (its S3 rights unchanged)", code)
	}

	// Removing the user removes the service account it minted.
	if err := admin.RemoveUser(ctx, user); err != nil {
		t.Fatalf("RemoveUser: %v", err)
	}
	if code := put(t, mintedS3, own); code != "InvalidAccessKeyId" {
		t.Errorf("minted service account after RemoveUser: PutObject got %q, want InvalidAccessKeyId", code)
	}
}
