package adminapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// pathPrefix is where MinIO serves version 3 of its admin API, on the S3
// port.
const pathPrefix = "/minio/admin/v3"

const (
	defaultRegion      = "us-east-1"
	defaultCallTimeout = 30 * time.Second
	// maxResponse bounds what is read of an answer: a list of every user
	// of a large server fits many times over.
	maxResponse = 64 << 20
	// maxErrorText bounds the part of an unparsable error answer that goes
	// into an error message.
	maxErrorText = 256
)

// Config says which server to talk to, as whom.
type Config struct {
	// Endpoint is the server's S3 URL, http or https, with no path:
	// "https://minio.example.com:9000".
	Endpoint string
	// AccessKey and SecretKey are the admin's keys: the root user's, or a
	// user's allowed the admin:* actions used. The secret key signs each
	// request and encrypts and decrypts the bodies that carry secrets.
	AccessKey, SecretKey string
	// Region requests are signed for: the server's region
	// (MINIO_SITE_REGION); "us-east-1" if empty, MinIO's default.
	Region string
	// HTTPClient sends the requests; http.DefaultClient if nil.
	HTTPClient *http.Client
	// CallTimeout bounds each call whose context has no deadline; 30s if
	// zero.
	CallTimeout time.Duration
}

// Client calls one MinIO server's admin API. It is safe for concurrent use.
type Client struct {
	endpoint    *url.URL
	creds       aws.Credentials
	region      string
	http        *http.Client
	callTimeout time.Duration
	signer      *v4.Signer
}

// New returns a client for cfg. It makes no call: a wrong key shows at the
// first one, as ErrCredentialsRejected.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.Endpoint)
	switch {
	case err != nil:
		return nil, fmt.Errorf("minio admin endpoint: %w", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("minio admin endpoint %q: want an http or https URL", cfg.Endpoint)
	case u.Host == "":
		return nil, fmt.Errorf("minio admin endpoint %q: no host", cfg.Endpoint)
	case strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return nil, fmt.Errorf("minio admin endpoint %q: want scheme://host[:port] only", cfg.Endpoint)
	case cfg.AccessKey == "" || cfg.SecretKey == "":
		return nil, errors.New("minio admin: access key and secret key are required")
	}
	c := &Client{
		endpoint:    &url.URL{Scheme: u.Scheme, Host: u.Host},
		creds:       aws.Credentials{AccessKeyID: cfg.AccessKey, SecretAccessKey: cfg.SecretKey},
		region:      cfg.Region,
		http:        cfg.HTTPClient,
		callTimeout: cfg.CallTimeout,
		// MinIO checks the path as sent, not escaped a second time, as
		// for S3.
		signer: v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }),
	}
	if c.region == "" {
		c.region = defaultRegion
	}
	if c.http == nil {
		c.http = http.DefaultClient
	}
	if c.callTimeout == 0 {
		c.callTimeout = defaultCallTimeout
	}
	return c, nil
}

// Sentinel errors that an *Error matches with errors.Is, by the server's
// error code.
var (
	// ErrNoSuchUser: the user does not exist (XMinioAdminNoSuchUser).
	ErrNoSuchUser = errors.New("no such user")
	// ErrNoSuchPolicy: the canned policy does not exist
	// (XMinioAdminNoSuchPolicy).
	ErrNoSuchPolicy = errors.New("no such policy")
	// ErrCredentialsRejected: the server does not know the admin's access
	// key (InvalidAccessKeyId) or the secret key is not its own
	// (SignatureDoesNotMatch).
	ErrCredentialsRejected = errors.New("credentials rejected")
	// ErrPolicyChangeAlreadyApplied: an attach of a policy the user
	// already has, or a detach of one it does not have
	// (XMinioAdminPolicyChangeAlreadyApplied).
	ErrPolicyChangeAlreadyApplied = errors.New("policy change already applied")
	// ErrNoSuchServiceAccount: the service account does not exist
	// (XMinioInvalidIAMCredentials, the code MinIO answers a deletion of
	// a missing one with).
	ErrNoSuchServiceAccount = errors.New("no such service account")
)

var codeSentinels = map[string]error{
	"XMinioAdminNoSuchUser":                 ErrNoSuchUser,
	"XMinioAdminNoSuchPolicy":               ErrNoSuchPolicy,
	"InvalidAccessKeyId":                    ErrCredentialsRejected,
	"SignatureDoesNotMatch":                 ErrCredentialsRejected,
	"XMinioAdminPolicyChangeAlreadyApplied": ErrPolicyChangeAlreadyApplied,
	"XMinioInvalidIAMCredentials":           ErrNoSuchServiceAccount,
}

// Error is the server's refusal of a call.
type Error struct {
	// Op is the API call: "add-user", "idp/builtin/policy/attach".
	Op string
	// StatusCode is the HTTP status of the answer.
	StatusCode int
	// Code and Message are the server's error code and text; Code is
	// empty when the answer was not MinIO's JSON error (Message then
	// holds the start of the answer).
	Code, Message string
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "minio admin %s: ", e.Op)
	if errors.Is(e, ErrCredentialsRejected) {
		b.WriteString("credentials rejected: ")
	}
	if e.Code != "" {
		fmt.Fprintf(&b, "%s (HTTP %d)", e.Code, e.StatusCode)
	} else {
		fmt.Fprintf(&b, "HTTP %d", e.StatusCode)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	return b.String()
}

// Unwrap is the sentinel error of the server's code, if it has one.
func (e *Error) Unwrap() error { return codeSentinels[e.Code] }

// call is one admin API request.
type call struct {
	method string
	op     string // path below pathPrefix: "add-user"
	query  url.Values
	body   []byte
	// encryptBody sends body encrypted with the admin's secret key;
	// decryptAnswer decrypts the answer with it.
	encryptBody, decryptAnswer bool
}

// do sends c, signed, and returns the answer's body (decrypted if
// c.decryptAnswer). An answer other than 2xx is an *Error.
func (cl *Client) do(ctx context.Context, c call) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cl.callTimeout)
		defer cancel()
	}
	body := c.body
	if c.encryptBody {
		var err error
		if body, err = encrypt(cl.creds.SecretAccessKey, body); err != nil {
			return nil, fmt.Errorf("minio admin %s: %w", c.op, err)
		}
	}
	u := *cl.endpoint
	u.Path = pathPrefix + "/" + c.op
	u.RawQuery = c.query.Encode()
	req, err := http.NewRequestWithContext(ctx, c.method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("minio admin %s: %w", c.op, err)
	}
	sum := sha256.Sum256(body)
	payloadHash := hex.EncodeToString(sum[:])
	req.Header.Set("X-Amz-Content-Sha256", payloadHash)
	if len(body) > 0 {
		// The attach and detach calls refuse any other type, so that the
		// body is never read as a form.
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	if err := cl.signer.SignHTTP(ctx, cl.creds, req, payloadHash, "s3", cl.region, time.Now()); err != nil {
		return nil, fmt.Errorf("minio admin %s: sign: %w", c.op, err)
	}
	resp, err := cl.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("minio admin %s: %w", c.op, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil {
		return nil, fmt.Errorf("minio admin %s: read answer: %w", c.op, err)
	}
	if len(answer) > maxResponse {
		return nil, fmt.Errorf("minio admin %s: answer longer than %d bytes", c.op, maxResponse)
	}
	if resp.StatusCode/100 != 2 {
		return nil, answerError(c.op, resp.StatusCode, answer)
	}
	if c.decryptAnswer {
		if answer, err = decrypt(cl.creds.SecretAccessKey, answer); err != nil {
			return nil, fmt.Errorf("minio admin %s: answer: %w", c.op, err)
		}
	}
	return answer, nil
}

// answerError is the *Error of a refusal: MinIO answers admin calls' errors
// in JSON ({"Code": ..., "Message": ...}), a few (set-bucket-quota's) in
// S3's XML; anything else (a proxy's page) is quoted, shortened.
func answerError(op string, status int, answer []byte) *Error {
	var wire struct{ Code, Message string }
	if err := json.Unmarshal(answer, &wire); err == nil && wire.Code != "" {
		return &Error{Op: op, StatusCode: status, Code: wire.Code, Message: wire.Message}
	}
	if err := xml.Unmarshal(answer, &wire); err == nil && wire.Code != "" {
		return &Error{Op: op, StatusCode: status, Code: wire.Code, Message: wire.Message}
	}
	text := strings.TrimSpace(string(answer))
	if len(text) > maxErrorText {
		text = text[:maxErrorText] + "..."
	}
	return &Error{Op: op, StatusCode: status, Message: text}
}
