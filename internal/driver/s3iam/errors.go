package s3iam

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// errorCode is the API error code of err ("NoSuchBucket"), or "".
func errorCode(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}

// httpStatus is the HTTP status of the response behind err, or 0. HEAD
// answers carry no error body, so for HeadBucket the status is all there is.
func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func hasCode(err error, codes ...string) bool {
	c := errorCode(err)
	if c == "" {
		return false
	}
	for _, want := range codes {
		if c == want {
			return true
		}
	}
	return false
}

// Codes that mean "no such thing". S3 servers disagree on the code for a
// bucket without tags: AWS and versitygw say NoSuchTagSet, some older Ceph
// and MinIO releases NoSuchTagSetError or an empty 200.
var (
	codesNoBucket     = []string{"NoSuchBucket", "NotFound"}
	codesNoTags       = []string{"NoSuchTagSet", "NoSuchTagSetError"}
	codesNoEntity     = []string{"NoSuchEntity"}
	codesNotSupported = []string{"NotImplemented", "MethodNotAllowed", "UnsupportedOperation"}
	codesNoVersioning = append([]string{"VersioningNotConfigured"}, codesNotSupported...)
	// codesInvalidBucket are S3's refusals of the request itself (4xx):
	// the same request gets the same answer however often it is sent.
	// versitygw answers a bucket with more than 50 tags "BadRequest".
	// (RequestTimeout, also a 400, is not one: a retry can succeed.)
	codesInvalidBucket = []string{"InvalidBucketName", "InvalidTag", "InvalidLocationConstraint",
		"MalformedXML", "InvalidArgument", "InvalidRequest", "BadRequest"}
	codesInvalidIAM = []string{"ValidationError", "InvalidInput", "MalformedPolicyDocument"}
	codesBadCreds   = []string{
		"InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidClientTokenId",
		"AccessDenied", "AuthorizationHeaderMalformed", "ExpiredToken",
		"InvalidToken", "MissingAuthenticationToken", "IncompleteSignature",
		"UnrecognizedClientException", "Forbidden",
	}
)

// mapBucketErr turns refusals no retry can fix into driver.ErrInvalid and
// wraps everything with what was being done.
func mapBucketErr(err error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	switch {
	case hasCode(err, codesInvalidBucket...):
		return &refusal{msg: msg, err: err}
	case hasCode(err, "BucketAlreadyExists"):
		return fmt.Errorf("%s: %w (%w)", msg, driver.ErrOwnedByOther, err)
	}
	return fmt.Errorf("%s: %w", msg, err)
}

func mapIAMErr(err error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if hasCode(err, codesInvalidIAM...) {
		return &refusal{msg: msg, err: err}
	}
	return fmt.Errorf("%s: %w", msg, err)
}

// refusal is the backend's refusal, for good, of a request (it wraps
// driver.ErrInvalid and the SDK's error). The engine shows its text to the
// platform's user as the reason the operation failed, so it says what was
// being done and the server's code and message, and leaves out what the SDK
// adds: the operation name, the HTTP status, the request and host ids.
type refusal struct {
	msg string
	// note, if set, says what the code means in plain words.
	note string
	err  error
}

func (r *refusal) Error() string {
	s := r.msg + ": " + driver.ErrInvalid.Error()
	if r.note != "" {
		s += ": " + r.note
	}
	return s + " (" + reason(r.err) + ")"
}

func (r *refusal) Unwrap() []error { return []error{driver.ErrInvalid, r.err} }

// EndpointError says which endpoint failed a health check and why, in a
// sentence an operator can act on.
type EndpointError struct {
	// Service is "S3" or "IAM".
	Service string
	// Endpoint is the URL, or a description of the AWS default.
	Endpoint string
	// Reason is a short cause: "credentials rejected (InvalidAccessKeyId)",
	// "connection refused".
	Reason string
	Err    error
}

func (e *EndpointError) Error() string {
	return fmt.Sprintf("%s endpoint %s: %s", e.Service, e.Endpoint, e.Reason)
}

func (e *EndpointError) Unwrap() error { return e.Err }

func endpointError(service, endpoint string, err error) error {
	return &EndpointError{Service: service, Endpoint: endpoint, Reason: reason(err), Err: err}
}

// reason names the cause of a failed call without repeating the SDK's
// operation and retry wrapping.
func reason(err error) string {
	if c := errorCode(err); c != "" {
		if hasCode(err, codesBadCreds...) {
			return "credentials rejected (" + c + ")"
		}
		var apiErr smithy.APIError
		errors.As(err, &apiErr)
		if m := apiErr.ErrorMessage(); m != "" {
			return c + ": " + m
		}
		return c
	}
	if s := httpStatus(err); s == 401 || s == 403 {
		return fmt.Sprintf("credentials rejected (HTTP %d)", s)
	}
	var dnsErr *net.DNSError
	var opErr *net.OpError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer before the deadline"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &dnsErr):
		return "cannot resolve host " + dnsErr.Name + ": " + dnsErr.Err
	case errors.As(err, &opErr):
		return opErr.Error()
	}
	return err.Error()
}
