package s3iam

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"

	"github.com/bucketbroker/bucketbroker/internal/sdkhttp"
	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

const (
	// OwnerTagKey is the bucket and user tag that holds the owner mark.
	OwnerTagKey = "bucketbroker.io/owner"
	// reservedTagPrefix is the tag namespace the driver owns; callers may
	// not set extra tags in it.
	reservedTagPrefix = "bucketbroker.io/"
	// UserPath is the IAM path of every user the driver creates, so that an
	// operator (and the leak audit) can list them apart from other users.
	UserPath = "/bucketbroker/"
	// PolicyName is the inline policy that scopes a user to its bucket.
	PolicyName = "bucketbroker-bucket-access"

	defaultRegion = "us-east-1"
	// defaultIAMRegion signs requests to a custom IAM endpoint: AWS IAM in
	// the aws partition, versitygw and Ceph all expect us-east-1.
	defaultIAMRegion = "us-east-1"
	// DefaultCallTimeout bounds each SDK call (all its retries included)
	// made with a context that has no deadline of its own.
	DefaultCallTimeout = 30 * time.Second
)

// Config says where the backend is and how to sign requests to it.
type Config struct {
	// S3Endpoint is the S3 API URL; empty means AWS S3 for Region.
	S3Endpoint string
	// IAMEndpoint is the IAM API URL; empty means AWS IAM. It must be set
	// when S3Endpoint is, so that a custom S3 server is never paired with
	// AWS IAM by accident.
	IAMEndpoint string
	// Region is the S3 signing region; empty means us-east-1.
	Region string
	// IAMRegion is the signing region for a custom IAMEndpoint; empty
	// means us-east-1. Without IAMEndpoint the SDK picks it from Region.
	IAMRegion string
	// PathStyle addresses buckets as endpoint/bucket instead of
	// bucket.endpoint (needed by most non-AWS servers).
	PathStyle bool
	// AccessKeyID and SecretAccessKey are the driver's own credentials,
	// allowed to manage buckets and IAM users. Empty means the SDK's
	// default chain (environment, shared files, instance or pod role).
	AccessKeyID     string
	SecretAccessKey string
	// HTTPClient replaces the SDK's default HTTP client (optional).
	HTTPClient *http.Client
	// CallTimeout overrides DefaultCallTimeout (optional).
	CallTimeout time.Duration
}

// Driver implements driver.Driver on an S3 API and an AWS IAM API.
type Driver struct {
	s3  *s3.Client
	iam *iam.Client
	// s3Name and iamName name the endpoints in error messages.
	s3Name    string
	iamName   string
	partition string
	region    string
	// createFirst: the server refuses to create a bucket that exists, so
	// a successful CreateBucket proves the bucket is new. AWS in us-east-1
	// answers 200 to re-creating a bucket the account owns, so there the
	// driver looks before it creates.
	createFirst bool
	// probeName is the bucket and user name the readiness check asks
	// about, made up at random (check).
	probeName string
	// userMarks is what CreateUser's answers showed of the owner mark
	// (unknown until the first, see AtomicUserMarks).
	userMarks marks
	// bucketMarks is what the server showed of the owner mark sent in
	// CreateBucket (unknown until the first check, see createBucket).
	bucketMarks marks
}

// What a server showed of owner marks sent in a create call (marks).
const (
	markUnknown int32 = iota // nothing seen yet
	markKept                 // every create seen kept the mark
	markDropped              // a create dropped or refused it
)

// marks is what the server has shown of owner marks sent in one kind of
// create call, for the process's life: unknown until a create is seen,
// kept once one kept the mark, dropped for good once one did not (a
// server that dropped it once may again), whatever is seen after.
type marks struct{ state atomic.Int32 }

// saw records what one create showed.
func (m *marks) saw(kept bool) {
	if !kept {
		m.state.Store(markDropped)
		return
	}
	m.state.CompareAndSwap(markUnknown, markKept)
}

func (m *marks) kept() bool    { return m.state.Load() == markKept }
func (m *marks) dropped() bool { return m.state.Load() == markDropped }

var (
	_ driver.Driver           = (*Driver)(nil)
	_ driver.AtomicUserMarker = (*Driver)(nil)
)

// New builds a Driver. It does not contact the backend: call Observe with
// an empty request to check the endpoints and credentials.
func New(cfg Config) (*Driver, error) {
	if cfg.S3Endpoint != "" && cfg.IAMEndpoint == "" {
		return nil, fmt.Errorf("s3iam: an IAM endpoint is required with S3 endpoint %s: %w", cfg.S3Endpoint, driver.ErrInvalid)
	}
	if (cfg.AccessKeyID == "") != (cfg.SecretAccessKey == "") {
		return nil, fmt.Errorf("s3iam: access key id and secret access key must be set together: %w", driver.ErrInvalid)
	}
	if cfg.Region == "" {
		cfg.Region = defaultRegion
	}
	if cfg.IAMRegion == "" {
		cfg.IAMRegion = defaultIAMRegion
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}

	var awsCfg aws.Config
	if cfg.AccessKeyID != "" {
		awsCfg = aws.Config{
			Region:      cfg.Region,
			Credentials: aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, "")),
		}
	} else {
		// Reads only the environment and local files; credentials from a
		// role are fetched on first use, under that call's deadline.
		var err error
		awsCfg, err = config.LoadDefaultConfig(context.Background(), config.WithRegion(cfg.Region))
		if err != nil {
			return nil, fmt.Errorf("s3iam: load AWS configuration: %w", err)
		}
	}
	// cfg's client, the one the AWS configuration chose (a CA bundle of
	// the environment) or the SDK's default, with the fix of
	// internal/sdkhttp: without it, a call the server carried out can read
	// as failed on a loaded machine, and be sent again.
	switch {
	case cfg.HTTPClient != nil:
		awsCfg.HTTPClient = sdkhttp.Client(cfg.HTTPClient)
	case awsCfg.HTTPClient != nil:
		awsCfg.HTTPClient = sdkhttp.Wrap(awsCfg.HTTPClient)
	default:
		awsCfg.HTTPClient = sdkhttp.Client(nil)
	}
	// The standard retryer stays: bounded attempts with backoff. Its
	// quota keeps a failing backend from being hammered.
	awsCfg.APIOptions = append(awsCfg.APIOptions, callTimeout(cfg.CallTimeout))

	d := &Driver{
		s3Name:      cfg.S3Endpoint,
		iamName:     cfg.IAMEndpoint,
		partition:   partition(cfg.S3Endpoint, cfg.Region),
		region:      cfg.Region,
		createFirst: cfg.S3Endpoint != "" || (cfg.Region != "" && cfg.Region != defaultRegion),
		probeName:   newProbeName(),
	}
	if d.s3Name == "" {
		d.s3Name = "AWS S3 (" + cfg.Region + ")"
	}
	if d.iamName == "" {
		d.iamName = "AWS IAM"
	}
	d.s3 = s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.S3Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.S3Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
		// Checksums only where the API requires them (DeleteObjects):
		// several S3-compatible servers reject the SDK's default trailing
		// checksums.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	d.iam = iam.NewFromConfig(awsCfg, func(o *iam.Options) {
		if cfg.IAMEndpoint != "" {
			o.BaseEndpoint = aws.String(cfg.IAMEndpoint)
			o.Region = cfg.IAMRegion
		}
	})
	return d, nil
}

// callTimeout gives every SDK call a deadline when its context has none,
// so that no backend call can hang a reconciler forever.
func callTimeout(d time.Duration) func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("bucketbroker.CallTimeout",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				if _, ok := ctx.Deadline(); !ok {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, d)
					defer cancel()
				}
				return next.HandleInitialize(ctx, in)
			}), middleware.Before)
	}
}

// partition is the ARN partition of the S3 resources named in policies.
// S3-compatible servers all use "aws".
func partition(endpoint, region string) string {
	if endpoint != "" {
		return "aws"
	}
	switch {
	case strings.HasPrefix(region, "cn-"):
		return "aws-cn"
	case strings.HasPrefix(region, "us-gov-"):
		return "aws-us-gov"
	case strings.HasPrefix(region, "us-isob-"):
		return "aws-iso-b"
	case strings.HasPrefix(region, "us-iso-"):
		return "aws-iso"
	}
	return "aws"
}
