package s3gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/gofiber/fiber/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/valyala/fasthttp"
	"github.com/versity/versitygw/iamapi"
	"github.com/versity/versitygw/s3api"
	"github.com/versity/versitygw/s3api/middlewares"

	"github.com/bucketbroker/bucketbroker/internal/sdkhttp"
)

// slowClient connects to addr, sends half a request header and then a
// byte a second, and returns when the server closes the connection (or
// after limit): how long the server kept it.
func slowClient(addr string, limit time.Duration) (time.Duration, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	began := time.Now()
	if _, err := io.WriteString(c, "PUT /slow HTTP/1.1\r\nHost: "+addr+"\r\nX-Slow: "); err != nil {
		return 0, err
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_, _ = io.Copy(io.Discard, c) // until the server closes
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	deadline := time.After(limit)
	for {
		select {
		case <-closed:
			return time.Since(began), nil
		case <-deadline:
			return time.Since(began), nil
		case <-tick.C:
			_, _ = io.WriteString(c, "x") // fails once the server closed
		}
	}
}

// TestSlowClientsAreCut holds each public listener's every connection
// with clients that send a byte a second of a request header. The server
// cuts each within the header timeout, and while they hold the listener,
// further public clients are answered 503 and the process's own calls,
// through the listeners of their own, succeed.
func TestSlowClientsAreCut(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.S3MaxConnections, cfg.IAMMaxConnections = 8, 8
	srv := start(t, cfg)
	creds := credentials.NewStaticCredentialsProvider(cfg.RootAccessKey, cfg.RootSecretKey, "")
	head := func(endpoint string) func(context.Context) error {
		c := s3.New(s3.Options{HTTPClient: sdkhttp.Client(nil), Region: srv.Region(), BaseEndpoint: aws.String(endpoint), UsePathStyle: true,
			Credentials: creds, Retryer: aws.NopRetryer{}})
		return func(ctx context.Context) error {
			_, err := c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("no-such-bucket")})
			if _, ok := errors.AsType[*types.NotFound](err); ok {
				return nil
			}
			return err
		}
	}
	getUser := func(endpoint string) func(context.Context) error {
		c := iam.New(iam.Options{HTTPClient: sdkhttp.Client(nil), Region: IAMRegion, BaseEndpoint: aws.String(endpoint), Credentials: creds, Retryer: aws.NopRetryer{}})
		return func(ctx context.Context) error {
			_, err := c.GetUser(ctx, &iam.GetUserInput{UserName: aws.String("no-such-user")})
			if apiCode(err) == "NoSuchEntity" {
				return nil
			}
			return err
		}
	}
	for _, tc := range []struct {
		name        string
		public, own string
		max         int
		call        func(string) func(context.Context) error
	}{
		{"S3", srv.S3Endpoint(), srv.OwnS3Endpoint(), cfg.S3MaxConnections, head},
		{"IAM", srv.IAMEndpoint(), srv.OwnIAMEndpoint(), cfg.IAMMaxConnections, getUser},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := strings.TrimPrefix(tc.public, "http://")
			// Generous: the header timeout is 10 s; before the limits,
			// none was cut in 40 s.
			const limit = 30 * time.Second
			kept := make([]time.Duration, tc.max)
			var wg sync.WaitGroup
			for i := range tc.max {
				wg.Go(func() {
					d, err := slowClient(addr, limit)
					if err != nil {
						t.Errorf("slow client: %v", err)
					}
					kept[i] = d
				})
			}
			time.Sleep(time.Second) // all connected
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tc.call(tc.own)(ctx); err != nil {
				t.Errorf("call through the own listener while the public one is full: %v", err)
			}
			if code := rawStatus(t, addr); code != http.StatusServiceUnavailable {
				t.Errorf("a public client beyond the limit got %d, want 503", code)
			}
			wg.Wait()
			ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			for i, d := range kept {
				if d >= limit {
					t.Errorf("slow client %d was kept %v, want cut within %v", i, d.Round(time.Second), headerTimeout)
				}
			}
			if err := tc.call(tc.public)(ctx); err != nil {
				t.Errorf("public call once the slow clients are cut: %v", err)
			}
		})
	}
}

// rawStatus sends a request to addr and returns the answer's status code.
// A connection beyond the limit is answered as soon as it is accepted,
// which net/http's client takes for a broken connection.
func rawStatus(t *testing.T, addr string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Errorf("dial %s: %v", addr, err)
		return 0
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Errorf("GET %s: %v", addr, err)
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// TestFiberApp: fiberApp finds the fiber app of both versitygw servers,
// and says what it cannot find.
func TestFiberApp(t *testing.T) {
	gw, err := s3api.New(nil, middlewares.RootUserConfig{}, "us-east-1", nil, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	iamSrv, err := iamapi.New(&userStore{}, iamapi.RootCredentials{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		server  any
		wantErr bool
	}{
		{"S3 server", gw, false},
		{"IAM API", iamSrv, false},
		{"not a pointer", *gw, true},
		{"no app field", &struct{ App *fiber.App }{}, true},
		{"nil", (*s3api.S3ApiServer)(nil), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app, err := fiberApp(tc.server)
			if got := err != nil; got != tc.wantErr {
				t.Fatalf("fiberApp: error %v, want error %v", err, tc.wantErr)
			}
			if err == nil && app.Server() == nil {
				t.Error("fiberApp: an app without a server")
			}
		})
	}
}

// TestBodyDeadline: the body gets its base time plus a second per
// minBodyRate bytes declared, and an hour when no length is declared.
func TestBodyDeadline(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header string
		want   time.Duration
	}{
		{"no body", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", bodyTimeout},
		{"small body", "PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n", bodyTimeout},
		{"1 GiB", "PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n\r\n", bodyTimeout + 16384*time.Second},
		{"chunked", "PUT / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", unknownBodyTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h fasthttp.RequestHeader
			if err := h.Read(bufio.NewReader(strings.NewReader(tc.header))); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, bodyDeadline(&h).ReadTimeout); diff != "" {
				t.Errorf("ReadTimeout (-want +got):\n%s", diff)
			}
		})
	}
}
