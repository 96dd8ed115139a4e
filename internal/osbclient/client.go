package osbclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// APIVersion is the X-Broker-API-Version every request carries.
const APIVersion = "2.17"

// Defaults for Config's zero values.
const (
	DefaultTimeout          = 60 * time.Second
	DefaultMaxResponseBytes = 1 << 20
)

// Config says where an upstream broker is and how to reach it.
type Config struct {
	// URL is the broker's base URL (http or https), without /v2.
	URL string
	// Username and Password are the broker's basic-auth credentials; no
	// Authorization header is sent when both are empty.
	Username, Password string
	// Timeout bounds a call whose context has no deadline (DefaultTimeout
	// when zero). A context deadline that is sooner wins.
	Timeout time.Duration
	// MaxResponseBytes bounds every response body (DefaultMaxResponseBytes
	// when zero); a longer body is an error, never truncated silently.
	MaxResponseBytes int64
	// TLS configures HTTPS.
	TLS TLSOptions
	// Transport, when set, replaces the client's own (TLS is then
	// ignored): for tests and for callers that share one.
	Transport http.RoundTripper
	// Wrap, when set, wraps the transport (the client's own or
	// Transport): for metrics. It sees requests with their credentials;
	// it must not log them.
	Wrap func(http.RoundTripper) http.RoundTripper
}

// TLSOptions configures the connection to an https upstream.
type TLSOptions struct {
	// CAFile is a PEM bundle trusted instead of the system roots.
	CAFile string
	// ServerName overrides the name the certificate is checked against.
	ServerName string
	// InsecureSkipVerify accepts any certificate. Only for tests.
	InsecureSkipVerify bool
}

// Client speaks OSB to one upstream broker. It is safe for concurrent use.
type Client struct {
	base     *url.URL
	user     string
	pass     string
	timeout  time.Duration
	maxBytes int64
	http     *http.Client
}

// New checks cfg and returns a client for it. It makes no request.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("new OSB client: parse URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("new OSB client: URL %q must be http:// or https:// with a host", cfg.URL)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("new OSB client: URL %q must carry no user info, query or fragment (credentials go in Username and Password)", u.Redacted())
	}
	if cfg.Timeout < 0 || cfg.MaxResponseBytes < 0 {
		return nil, fmt.Errorf("new OSB client: Timeout and MaxResponseBytes must not be negative")
	}
	c := &Client{base: u, user: cfg.Username, pass: cfg.Password, timeout: cfg.Timeout, maxBytes: cfg.MaxResponseBytes}
	if c.timeout == 0 {
		c.timeout = DefaultTimeout
	}
	if c.maxBytes == 0 {
		c.maxBytes = DefaultMaxResponseBytes
	}
	rt := cfg.Transport
	if rt == nil {
		tc, err := cfg.TLS.config()
		if err != nil {
			return nil, fmt.Errorf("new OSB client: %w", err)
		}
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = tc
		rt = t
	}
	if cfg.Wrap != nil {
		rt = cfg.Wrap(rt)
	}
	// No redirects: a broker that redirects a PUT elsewhere is
	// misconfigured, and following it would send the credentials along.
	c.http = &http.Client{Transport: rt, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	return c, nil
}

func (o TLSOptions) config() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: o.ServerName, InsecureSkipVerify: o.InsecureSkipVerify} //nolint:gosec // opt-in, documented as for tests
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("read CA file %q: no PEM certificate in it", o.CAFile)
		}
		tc.RootCAs = pool
	}
	return tc, nil
}

// URL returns the upstream's base URL without credentials, for logs.
func (c *Client) URL() string { return c.base.Redacted() }

// call is one request: method, path below the base URL (escaped), query, body (nil
// for none), the identity header. It returns the status and the body
// (bounded) of a success answer, or an *Error, or a transport error.
func (c *Client) call(ctx context.Context, method, path string, query url.Values, body any, identity string, ok ...int) (int, []byte, error) {
	if _, has := ctx.Deadline(); !has {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	u := *c.base
	escaped := strings.TrimSuffix(c.base.EscapedPath(), "/") + path
	plain, err := url.PathUnescape(escaped)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	u.Path, u.RawPath = plain, escaped
	u.RawQuery = query.Encode()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return 0, nil, fmt.Errorf("%s %s: encode body: %w", method, path, err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if c.user != "" || c.pass != "" {
		req.SetBasicAuth(c.user, c.pass)
	}
	req.Header.Set("X-Broker-API-Version", APIVersion)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if identity != "" {
		req.Header.Set("X-Broker-API-Originating-Identity", identity)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// url.Error repeats the URL, which carries no credentials (New
		// refuses user info in it).
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBytes+1))
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: read answer %d: %w", method, path, resp.StatusCode, err)
	}
	if int64(len(data)) > c.maxBytes {
		return 0, nil, fmt.Errorf("%s %s: answer %d: %w (limit %d bytes)", method, path, resp.StatusCode, ErrResponseTooLarge, c.maxBytes)
	}
	for _, s := range ok {
		if resp.StatusCode == s {
			return s, data, nil
		}
	}
	return 0, nil, newError(method, path, resp.StatusCode, data)
}

// ErrResponseTooLarge is returned for a body over Config.MaxResponseBytes.
var ErrResponseTooLarge = errors.New("response body too large")

// decode unmarshals a success body into v; an empty body is an empty object
// (a DELETE's 200 "{}" is sometimes sent as nothing).
func decode(method, path string, status int, data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s %s: decode answer %d: %w", method, path, status, err)
	}
	return nil
}
