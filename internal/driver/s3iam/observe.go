package s3iam

import (
	"context"
	"errors"

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

// check asks both endpoints for the smallest listing the driver's
// credentials must be allowed anyway, and says which one failed and why.
func (d *Driver) check(ctx context.Context) error {
	var errs []error
	if _, err := d.s3.ListBuckets(ctx, &s3.ListBucketsInput{MaxBuckets: aws.Int32(1)}); err != nil {
		errs = append(errs, endpointError("S3", d.s3Name, err))
	}
	_, err := d.iam.ListUsers(ctx, &iam.ListUsersInput{PathPrefix: aws.String(UserPath), MaxItems: aws.Int32(1)})
	if err != nil {
		errs = append(errs, endpointError("IAM", d.iamName, err))
	}
	return errors.Join(errs...)
}
