package drivertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// cleanupTimeout bounds each cleanup; t.Context is already canceled when
// cleanups run.
const cleanupTimeout = 2 * time.Minute

func randomID(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// names are the backend names and owner mark of one test resource.
type names struct {
	bucket string
	user   string
	owner  string
}

// namesFor derives the names of one resource exactly as the engine does,
// from a kind and an id. Tests vary the kind to stay unique across runs, so
// the id reaches the name derivation unchanged.
func (s *suite) namesFor(kind, id string) names {
	return names{
		bucket: driver.BucketName(s.cfg.Prefix, kind, id),
		user:   driver.UserName(s.cfg.Prefix, kind, id),
		owner:  driver.OwnerMark(kind, id),
	}
}

// newNames derives fresh names from the test name and a random kind.
func (s *suite) newNames(t *testing.T) names {
	return s.namesFor("t"+randomID(t), t.Name())
}

func (s *suite) s3Client(access, secret string) *s3.Client {
	return s3.New(s3.Options{
		Region:       s.cfg.Region,
		BaseEndpoint: optional(s.cfg.S3Endpoint),
		UsePathStyle: s.cfg.PathStyle,
		Credentials:  credentials.NewStaticCredentialsProvider(access, secret, ""),
		// Some S3-compatible servers reject the SDK's default checksums.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

func optional(v string) *string {
	if v == "" {
		return nil
	}
	return &v
}

func errorCode(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}

// denied reports whether the server refused a request with HTTP 403, the
// answer to both a policy denial and an unknown or deleted key.
func denied(err error) bool {
	var re *awshttp.ResponseError
	return errors.As(err, &re) && re.HTTPStatusCode() == http.StatusForbidden
}

// notFound reports whether the server answered 404.
func notFound(err error) bool {
	var re *awshttp.ResponseError
	return errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound
}

func put(ctx context.Context, c *s3.Client, bucket, key, body string) error {
	_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: strings.NewReader(body)})
	return err
}

func get(ctx context.Context, c *s3.Client, bucket, key string) (string, error) {
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		return "", err
	}
	defer out.Body.Close()
	b, err := io.ReadAll(out.Body)
	return string(b), err
}

func list(ctx context.Context, c *s3.Client, bucket string) ([]string, error) {
	var keys []string
	pages := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: &bucket})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	slices.Sort(keys)
	return keys, nil
}

func del(ctx context.Context, c *s3.Client, bucket, key string) error {
	_, err := c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: &key})
	return err
}

func multipart(ctx context.Context, c *s3.Client, bucket, key, body string) error {
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: &key})
	if err != nil {
		return fmt.Errorf("create multipart upload: %w", err)
	}
	part, err := c.UploadPart(ctx, &s3.UploadPartInput{
		Bucket: &bucket, Key: &key, UploadId: up.UploadId, PartNumber: aws.Int32(1), Body: strings.NewReader(body),
	})
	if err != nil {
		return fmt.Errorf("upload part: %w", err)
	}
	_, err = c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket: &bucket, Key: &key, UploadId: up.UploadId,
		MultipartUpload: &s3types.CompletedMultipartUpload{Parts: []s3types.CompletedPart{{ETag: part.ETag, PartNumber: aws.Int32(1)}}},
	})
	if err != nil {
		return fmt.Errorf("complete multipart upload: %w", err)
	}
	return nil
}

// await retries check until it returns nil or Config.Propagation has
// passed, and returns its last error. With no Propagation it checks once:
// the server must answer right at once.
func (s *suite) await(ctx context.Context, check func() error) error {
	deadline := time.Now().Add(s.cfg.Propagation)
	for {
		err := check()
		if err == nil || !time.Now().Before(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// wantAllowed fails the test unless op succeeds (within Propagation).
func (s *suite) wantAllowed(ctx context.Context, t *testing.T, what string, op func() error) {
	t.Helper()
	if err := s.await(ctx, op); err != nil {
		t.Errorf("%s: got error %v, want success", what, err)
	}
}

// wantDenied fails the test unless op is refused with HTTP 403 (within
// Propagation).
func (s *suite) wantDenied(ctx context.Context, t *testing.T, what string, op func() error) {
	t.Helper()
	err := s.await(ctx, func() error {
		err := op()
		switch {
		case denied(err):
			return nil
		case err == nil:
			return errors.New("allowed")
		}
		return err
	})
	if err != nil {
		t.Errorf("%s: got %v, want HTTP 403", what, err)
	}
}

// createRootBucket creates a bucket behind the driver's back, with no
// owner mark, holding one object, and removes it after the test.
func (s *suite) createRootBucket(ctx context.Context, t *testing.T, bucket, key, body string) {
	t.Helper()
	in := &s3.CreateBucketInput{Bucket: &bucket}
	if s.cfg.Region != "" && s.cfg.Region != "us-east-1" {
		in.CreateBucketConfiguration = &s3types.CreateBucketConfiguration{LocationConstraint: s3types.BucketLocationConstraint(s.cfg.Region)}
	}
	if _, err := s.root.CreateBucket(ctx, in); err != nil {
		t.Fatalf("root: create bucket %q: %v", bucket, err)
	}
	s.removeBucketAfter(t, bucket)
	if err := put(ctx, s.root, bucket, key, body); err != nil {
		t.Fatalf("root: put %s/%s: %v", bucket, key, err)
	}
}

// removeBucketAfter deletes the bucket and everything in it with the root
// keys once the test is over, whoever made it.
func (s *suite) removeBucketAfter(t *testing.T, bucket string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		keys, err := list(ctx, s.root, bucket)
		if c := errorCode(err); c == "NoSuchBucket" || c == "InvalidBucketName" {
			return
		}
		if err != nil {
			t.Errorf("cleanup: list bucket %q: %v", bucket, err)
			return
		}
		for _, k := range keys {
			if err := del(ctx, s.root, bucket, k); err != nil {
				t.Errorf("cleanup: delete %s/%s: %v", bucket, k, err)
			}
		}
		_, err = s.root.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &bucket})
		if err != nil && errorCode(err) != "NoSuchBucket" {
			t.Errorf("cleanup: delete bucket %q: %v", bucket, err)
		}
	})
}

// listVersions lists every object version and delete marker in bucket.
func listVersions(ctx context.Context, c *s3.Client, bucket string) ([]s3types.ObjectIdentifier, error) {
	var ids []s3types.ObjectIdentifier
	pages := s3.NewListObjectVersionsPaginator(c, &s3.ListObjectVersionsInput{Bucket: &bucket})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, v := range page.Versions {
			ids = append(ids, s3types.ObjectIdentifier{Key: v.Key, VersionId: v.VersionId})
		}
		for _, m := range page.DeleteMarkers {
			ids = append(ids, s3types.ObjectIdentifier{Key: m.Key, VersionId: m.VersionId})
		}
	}
	return ids, nil
}

// removeVersionedBucketAfter deletes a bucket that may have versioning on,
// every version and delete marker in it, with the root keys once the test
// is over.
func (s *suite) removeVersionedBucketAfter(t *testing.T, bucket string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		ids, err := listVersions(ctx, s.root, bucket)
		if errorCode(err) == "NoSuchBucket" {
			return
		}
		if err != nil {
			t.Errorf("cleanup: list object versions of %q: %v", bucket, err)
			return
		}
		for _, id := range ids {
			_, err := s.root.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: id.Key, VersionId: id.VersionId})
			if err != nil {
				t.Errorf("cleanup: delete %s/%s version %s: %v", bucket, aws.ToString(id.Key), aws.ToString(id.VersionId), err)
			}
		}
		_, err = s.root.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &bucket})
		if err != nil && errorCode(err) != "NoSuchBucket" {
			t.Errorf("cleanup: delete bucket %q: %v", bucket, err)
		}
	})
}

// revokeAfter revokes the driver's credential once the test is over.
func (s *suite) revokeAfter(t *testing.T, user, owner string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := s.cfg.Driver.RevokeCredential(ctx, user, owner); err != nil {
			t.Errorf("cleanup: revoke credential %q: %v", user, err)
		}
	})
}

// createRootUser creates an IAM user behind the driver's back, without
// tags, with one access key, and removes it after the test.
func (s *suite) createRootUser(ctx context.Context, t *testing.T, user string) string {
	t.Helper()
	if _, err := s.rootIAM.CreateUser(ctx, &iam.CreateUserInput{UserName: &user}); err != nil {
		t.Fatalf("root: create user %q: %v", user, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		keys, err := s.rootIAM.ListAccessKeys(ctx, &iam.ListAccessKeysInput{UserName: &user})
		if err != nil {
			t.Errorf("cleanup: list keys of %q: %v", user, err)
			return
		}
		for _, k := range keys.AccessKeyMetadata {
			if _, err := s.rootIAM.DeleteAccessKey(ctx, &iam.DeleteAccessKeyInput{UserName: &user, AccessKeyId: k.AccessKeyId}); err != nil {
				t.Errorf("cleanup: delete key of %q: %v", user, err)
			}
		}
		pols, err := s.rootIAM.ListUserPolicies(ctx, &iam.ListUserPoliciesInput{UserName: &user})
		if err != nil {
			t.Errorf("cleanup: list policies of %q: %v", user, err)
			return
		}
		for _, p := range pols.PolicyNames {
			if _, err := s.rootIAM.DeleteUserPolicy(ctx, &iam.DeleteUserPolicyInput{UserName: &user, PolicyName: &p}); err != nil {
				t.Errorf("cleanup: delete policy of %q: %v", user, err)
			}
		}
		if _, err := s.rootIAM.DeleteUser(ctx, &iam.DeleteUserInput{UserName: &user}); err != nil {
			t.Errorf("cleanup: delete user %q: %v", user, err)
		}
	})
	key, err := s.rootIAM.CreateAccessKey(ctx, &iam.CreateAccessKeyInput{UserName: &user})
	if err != nil {
		t.Fatalf("root: create key for %q: %v", user, err)
	}
	return aws.ToString(key.AccessKey.AccessKeyId)
}

// rootUserState is what the root keys see of a user.
func (s *suite) rootUserState(ctx context.Context, t *testing.T, user string) (keys, policies []string) {
	t.Helper()
	k, err := s.rootIAM.ListAccessKeys(ctx, &iam.ListAccessKeysInput{UserName: &user})
	if err != nil {
		t.Fatalf("root: list keys of %q: %v", user, err)
	}
	for _, m := range k.AccessKeyMetadata {
		keys = append(keys, aws.ToString(m.AccessKeyId))
	}
	p, err := s.rootIAM.ListUserPolicies(ctx, &iam.ListUserPoliciesInput{UserName: &user})
	if err != nil {
		t.Fatalf("root: list policies of %q: %v", user, err)
	}
	return keys, p.PolicyNames
}
