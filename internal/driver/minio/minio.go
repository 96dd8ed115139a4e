package minio

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/driver/minio/adminapi"
	"github.com/bucketbroker/bucketbroker/internal/driver/s3iam"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// DefaultCallTimeout bounds each call to the server made with a context
// that has no deadline of its own.
const DefaultCallTimeout = 30 * time.Second

// Config says where the MinIO server is and how to sign requests to it.
type Config struct {
	// Endpoint is the server's URL, scheme://host[:port]: MinIO serves the
	// S3 API and its admin API on the same port.
	Endpoint string
	// Region is the server's region (MINIO_SITE_REGION); empty means
	// us-east-1, MinIO's default.
	Region string
	// AccessKeyID and SecretAccessKey are the driver's own keys: MinIO's
	// root user, or a user allowed the admin actions on users, policies
	// and service accounts and the S3 actions on buckets.
	AccessKeyID     string
	SecretAccessKey string
	// HTTPClient replaces the default HTTP client (optional).
	HTTPClient *http.Client
	// CallTimeout overrides DefaultCallTimeout (optional).
	CallTimeout time.Duration
}

// Driver implements driver.Driver on MinIO: buckets through the S3 API,
// users, their keys and policies through MinIO's admin API.
type Driver struct {
	// buckets is the s3iam driver, used for its bucket calls only: they
	// speak plain S3, which MinIO serves (its IAM client is never called).
	buckets *s3iam.Driver
	admin   *adminapi.Client
	// probeName is the bucket and user name the readiness check asks
	// about, made up at random.
	probeName string
}

var (
	_ driver.Driver        = (*Driver)(nil)
	_ driver.QuotaEnforcer = (*Driver)(nil)
)

// New builds a Driver. It does not contact the server: call Observe with
// an empty request to check the endpoint and the keys.
func New(cfg Config) (*Driver, error) {
	switch {
	case cfg.Endpoint == "":
		return nil, fmt.Errorf("minio: the endpoint is required: %w", driver.ErrInvalid)
	case cfg.AccessKeyID == "" || cfg.SecretAccessKey == "":
		return nil, fmt.Errorf("minio: the access key id and secret access key are required: %w", driver.ErrInvalid)
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	buckets, err := s3iam.New(s3iam.Config{
		S3Endpoint: cfg.Endpoint,
		// s3iam wants an IAM endpoint beside a custom S3 one; the bucket
		// calls used here never reach it.
		IAMEndpoint:     cfg.Endpoint,
		Region:          cfg.Region,
		PathStyle:       true,
		AccessKeyID:     cfg.AccessKeyID,
		SecretAccessKey: cfg.SecretAccessKey,
		HTTPClient:      cfg.HTTPClient,
		CallTimeout:     cfg.CallTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("minio: %w", err)
	}
	admin, err := adminapi.New(adminapi.Config{
		Endpoint:    cfg.Endpoint,
		AccessKey:   cfg.AccessKeyID,
		SecretKey:   cfg.SecretAccessKey,
		Region:      cfg.Region,
		HTTPClient:  cfg.HTTPClient,
		CallTimeout: cfg.CallTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("minio: %w: %w", err, driver.ErrInvalid)
	}
	return &Driver{buckets: buckets, admin: admin, probeName: newProbeName()}, nil
}

// EnsureBucket implements driver.Driver (as the s3iam driver does). A
// bucket with versioning is made in two steps, marked first and then
// versioned: MinIO keeps a bucket's tags and its versioning in one record
// and loses one of two changes made at once, which the s3iam driver makes
// for a bucket it creates. A crash in between leaves the bucket marked and
// not versioned, which the retry finds ours and versions. The quota comes
// last, in the same record, once the bucket is ours.
func (d *Driver) EnsureBucket(ctx context.Context, spec driver.BucketSpec) error {
	if err := driver.CheckQuota(d, spec.Quota); err != nil {
		return fmt.Errorf("bucket %q: %w", spec.Name, err)
	}
	s3spec := spec
	s3spec.Quota = driver.Quota{}
	if spec.Versioning {
		marked := s3spec
		marked.Versioning = false
		if err := d.buckets.EnsureBucket(ctx, marked); err != nil {
			return err
		}
	}
	if err := d.buckets.EnsureBucket(ctx, s3spec); err != nil {
		return err
	}
	return d.ensureQuota(ctx, spec.Name, spec.Quota.MaxSize)
}

// QuotaSupport implements driver.QuotaEnforcer: MinIO keeps a hard limit
// on a bucket's size, and none on its number of objects.
func (d *Driver) QuotaSupport() driver.QuotaSupport {
	return driver.QuotaSupport{MaxSize: true}
}

// ensureQuota makes the bucket's hard size limit maxSize bytes, 0 for none,
// writing only when it differs.
func (d *Driver) ensureQuota(ctx context.Context, bucket string, maxSize int64) error {
	have, err := d.admin.BucketQuota(ctx, bucket)
	if err != nil {
		return fmt.Errorf("get quota of bucket %q: %w", bucket, err)
	}
	if have == uint64(maxSize) {
		return nil
	}
	if err := d.admin.SetBucketQuota(ctx, bucket, uint64(maxSize)); err != nil {
		return fmt.Errorf("set quota of bucket %q to %d bytes: %w", bucket, maxSize, err)
	}
	return nil
}

// DeleteBucket implements driver.Driver (as the s3iam driver does).
func (d *Driver) DeleteBucket(ctx context.Context, name, owner string, purge bool) error {
	return d.buckets.DeleteBucket(ctx, name, owner, purge)
}

// Observe implements driver.Driver. The bucket and the user are looked at
// at once.
func (d *Driver) Observe(ctx context.Context, req driver.ObserveRequest) (driver.Observation, error) {
	if req.Bucket == "" && req.UserName == "" {
		return driver.Observation{}, d.check(ctx)
	}
	var (
		obs      driver.Observation
		bucket   driver.Observation
		s3Err    error
		wg       sync.WaitGroup
		adminErr error
	)
	if req.Bucket != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bucket, s3Err = d.buckets.Observe(ctx, driver.ObserveRequest{Bucket: req.Bucket})
		}()
	}
	if req.UserName != "" {
		u, err := d.observeUser(ctx, req.UserName)
		if err == nil && u.exists {
			obs.UserExists, obs.UserOwner = true, u.owner
			obs.KeyIDs, err = d.keys(ctx, req.UserName)
		}
		adminErr = err
	}
	wg.Wait()
	if err := errors.Join(s3Err, adminErr); err != nil {
		return driver.Observation{}, err
	}
	obs.BucketExists, obs.BucketOwner = bucket.BucketExists, bucket.BucketOwner
	return obs, nil
}

// check asks the S3 API about a bucket and the admin API about a user,
// both of a name made up at random, and expects neither to exist. Both
// answers need the request authenticated (and the admin one the admin
// rights), so a wrong key fails the check; both cost the same however
// many buckets and users the server holds.
func (d *Driver) check(ctx context.Context) error {
	var s3Err error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := d.buckets.Observe(ctx, driver.ObserveRequest{Bucket: d.probeName}); err != nil {
			s3Err = fmt.Errorf("S3 API: %w", err)
		}
	}()
	_, err := d.admin.UserInfo(ctx, d.probeName)
	if errors.Is(err, adminapi.ErrNoSuchUser) {
		err = nil
	}
	if err != nil {
		err = fmt.Errorf("admin API: %w", err)
	}
	wg.Wait()
	return errors.Join(s3Err, err)
}

// newProbeName returns a bucket and user name nobody else has: the
// readiness check's.
func newProbeName() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "bucketbroker-probe-" + hex.EncodeToString(b)
}
