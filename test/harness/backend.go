package harness

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	iamtypes "github.com/aws/aws-sdk-go-v2/service/iam/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bucketbroker/bucketbroker/internal/sdkhttp"
)

// Backend is an S3 + IAM endpoint, or a MinIO server, and its root keys,
// seen from the test.
type Backend struct {
	S3, IAM              string // URLs; IAM is empty on MinIO
	AccessKey, SecretKey string
	// Prefix, when set, starts the names of what the broker under test
	// makes there; listings only count those.
	Prefix string
	// MinIO says the server is MinIO, which has no IAM API: Keys lists
	// users and keys through its admin API instead (MinIOBackend).
	MinIO bool
}

func (be Backend) ours(name string) bool {
	return be.Prefix == "" || strings.HasPrefix(name, be.Prefix+"-")
}

func (be Backend) s3(ak, sk string) *s3.Client {
	return s3.New(s3.Options{HTTPClient: sdkhttp.Client(nil), Region: "us-east-1", BaseEndpoint: aws.String(be.S3), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(ak, sk, "")})
}

// Buckets lists the buckets that are ours.
func (be Backend) Buckets() ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := be.s3(be.AccessKey, be.SecretKey).ListBuckets(ctx, &s3.ListBucketsInput{})
	if err != nil {
		return nil, fmt.Errorf("list buckets: %w", err)
	}
	var names []string
	for _, x := range out.Buckets {
		if n := aws.ToString(x.Name); be.ours(n) {
			names = append(names, n)
		}
	}
	return names, nil
}

// Keys maps every backend user that is ours to its access key ids (all
// pages: IAM lists 100 users per page).
func (be Backend) Keys() (map[string][]string, error) {
	if be.MinIO {
		return be.minioKeys()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := iam.New(iam.Options{HTTPClient: sdkhttp.Client(nil), Region: "us-east-1", BaseEndpoint: aws.String(be.IAM),
		Credentials: credentials.NewStaticCredentialsProvider(be.AccessKey, be.SecretKey, "")})
	var users []iamtypes.User
	for p := iam.NewListUsersPaginator(c, &iam.ListUsersInput{}); p.HasMorePages(); {
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list users: %w", err)
		}
		users = append(users, out.Users...)
	}
	m := map[string][]string{}
	for _, u := range users {
		name := aws.ToString(u.UserName)
		if !be.ours(name) {
			continue
		}
		ks, err := c.ListAccessKeys(ctx, &iam.ListAccessKeysInput{UserName: u.UserName})
		if err != nil {
			return nil, fmt.Errorf("list access keys of %s: %w", name, err)
		}
		m[name] = []string{}
		for _, k := range ks.AccessKeyMetadata {
			m[name] = append(m[name], aws.ToString(k.AccessKeyId))
		}
	}
	return m, nil
}

// Works writes an object with a binding's credentials into its bucket and
// deletes it again, so that the bucket stays empty for a deprovision. The
// object's name is its own, so that checks of several bindings of one
// bucket at once do not delete each other's object.
func (be Backend) Works(c map[string]any) error {
	ak, _ := c["access_key_id"].(string)
	sk, _ := c["secret_access_key"].(string)
	bucket, _ := c["bucket"].(string)
	if ak == "" || sk == "" || bucket == "" {
		return fmt.Errorf("credentials lack a key or a bucket: %v", c["access_key_id"])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c3 := be.s3(ak, sk)
	key := aws.String("harness-" + rand.Text())
	if _, err := c3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket),
		Key: key, Body: strings.NewReader("x")}); err != nil {
		return err
	}
	_, err := c3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: key})
	return err
}

// Put writes one object with a binding's credentials into its bucket: the
// application's data, which a deprovision with purge_on_delete must take
// with the bucket.
func (be Backend) Put(c map[string]any, key, body string) error {
	ak, _ := c["access_key_id"].(string)
	sk, _ := c["secret_access_key"].(string)
	bucket, _ := c["bucket"].(string)
	if ak == "" || sk == "" || bucket == "" {
		return fmt.Errorf("credentials lack a key or a bucket: %v", c["access_key_id"])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := be.s3(ak, sk).PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket),
		Key: aws.String(key), Body: strings.NewReader(body)})
	if err != nil {
		return fmt.Errorf("put object %s into %s: %w", key, bucket, err)
	}
	return nil
}

// Get reads one object with a binding's credentials from its bucket.
func (be Backend) Get(c map[string]any, key string) (string, error) {
	ak, _ := c["access_key_id"].(string)
	sk, _ := c["secret_access_key"].(string)
	bucket, _ := c["bucket"].(string)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := be.s3(ak, sk).GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return "", fmt.Errorf("get object %s from %s: %w", key, bucket, err)
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	if err != nil {
		return "", fmt.Errorf("read object %s from %s: %w", key, bucket, err)
	}
	return string(data), nil
}

// Delete deletes one object with a binding's credentials (in a versioned
// bucket: adds a delete marker).
func (be Backend) Delete(c map[string]any, key string) error {
	ak, _ := c["access_key_id"].(string)
	sk, _ := c["secret_access_key"].(string)
	bucket, _ := c["bucket"].(string)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := be.s3(ak, sk).DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}); err != nil {
		return fmt.Errorf("delete object %s from %s: %w", key, bucket, err)
	}
	return nil
}

// Objects lists the keys of a bucket's current objects with the root keys
// (all pages).
func (be Backend) Objects(bucket string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var keys []string
	c := be.s3(be.AccessKey, be.SecretKey)
	for p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String(bucket)}); p.HasMorePages(); {
		out, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list objects of %s: %w", bucket, err)
		}
		for _, o := range out.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	return keys, nil
}

// Versions lists a bucket's object versions and delete markers with the
// root keys (all pages), each as key@version.
func (be Backend) Versions(bucket string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []string
	c := be.s3(be.AccessKey, be.SecretKey)
	in := &s3.ListObjectVersionsInput{Bucket: aws.String(bucket)}
	for {
		page, err := c.ListObjectVersions(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("list object versions of %s: %w", bucket, err)
		}
		for _, v := range page.Versions {
			out = append(out, aws.ToString(v.Key)+"@"+aws.ToString(v.VersionId))
		}
		for _, m := range page.DeleteMarkers {
			out = append(out, aws.ToString(m.Key)+"@"+aws.ToString(m.VersionId)+" (delete marker)")
		}
		if !aws.ToBool(page.IsTruncated) {
			return out, nil
		}
		in.KeyMarker, in.VersionIdMarker = page.NextKeyMarker, page.NextVersionIdMarker
	}
}
