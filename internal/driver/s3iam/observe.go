package s3iam

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"golang.org/x/sync/errgroup"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// Observe implements driver.Driver. The bucket and the user are looked at
// at once: a controller's look at a new claim's two names then costs one
// round trip, not two.
func (d *Driver) Observe(ctx context.Context, req driver.ObserveRequest) (driver.Observation, error) {
	if req.Bucket == "" && req.UserName == "" {
		return driver.Observation{}, d.check(ctx)
	}
	var obs driver.Observation
	g, gctx := errgroup.WithContext(ctx)
	if req.Bucket != "" {
		g.Go(func() error {
			b, err := d.observeBucket(gctx, req.Bucket)
			obs.BucketExists, obs.BucketOwner = b.exists, b.owner()
			return err
		})
	}
	if req.UserName != "" {
		g.Go(func() error {
			u, err := d.observeUser(gctx, req.UserName)
			if err != nil || !u.exists {
				return err
			}
			obs.UserExists, obs.UserOwner = u.exists, u.owner
			keys, err := d.listKeys(gctx, req.UserName)
			for _, k := range keys {
				obs.KeyIDs = append(obs.KeyIDs, aws.ToString(k.AccessKeyId))
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return driver.Observation{}, err
	}
	return obs, nil
}

// check asks each endpoint about one name the driver made up when it was
// built (probeName), and expects it not to be there: S3 answers a listing of
// that bucket with NoSuchBucket and IAM a GetUser of that user with
// NoSuchEntity. Both answers need the request authenticated, so a wrong or
// unknown key fails the check; and both cost the same however many buckets
// and users the backend holds, where a listing of buckets or users (even of
// one) makes versitygw read every bucket's directory entry and every user's
// file. The IAM call is one the driver's credentials need anyway (Observe's
// look at a user); the S3 one is allowed by the bucket permissions a driver
// needs. Any answer about the name (it exists after all) also proves the
// endpoint works. The two run at once; the error says which one failed and
// why.
func (d *Driver) check(ctx context.Context) error {
	var s3Err, iamErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := d.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(d.probeName), MaxKeys: aws.Int32(1)})
		if err != nil && !hasCode(err, codesNoBucket...) {
			s3Err = endpointError("S3", d.s3Name, err)
		}
	}()
	_, err := d.iam.GetUser(ctx, &iam.GetUserInput{UserName: aws.String(d.probeName)})
	if err != nil && !hasCode(err, codesNoEntity...) {
		iamErr = endpointError("IAM", d.iamName, err)
	}
	wg.Wait()
	return errors.Join(s3Err, iamErr)
}

// newProbeName returns a bucket and user name nobody else has: the
// readiness check's (check).
func newProbeName() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "bucketbroker-probe-" + hex.EncodeToString(b)
}
