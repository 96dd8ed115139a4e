package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/bucketbroker/bucketbroker/internal/sdkhttp"
)

// slowFlood holds n connections to addr, each sending half a request
// header and then a byte a second; a connection the server cuts is dialed
// again, until stop. held counts the connections open now, cut those the
// server closed.
type slowFlood struct {
	held, cut atomic.Int64
	stop      chan struct{}
	wg        sync.WaitGroup
}

func flood(addr string, n int) *slowFlood {
	f := &slowFlood{stop: make(chan struct{})}
	for range n {
		f.wg.Go(func() {
			for {
				select {
				case <-f.stop:
					return
				default:
				}
				f.hold(addr)
			}
		})
	}
	return f
}

// hold keeps one slow connection until the server cuts it or stop.
func (f *slowFlood) hold(addr string) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		select { // the listen backlog is full: try again a little later
		case <-f.stop:
		case <-time.After(100 * time.Millisecond):
		}
		return
	}
	defer c.Close()
	if _, err := io.WriteString(c, "PUT /slow HTTP/1.1\r\nHost: "+addr+"\r\nX-Slow: "); err != nil {
		return
	}
	f.held.Add(1)
	defer f.held.Add(-1)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_, _ = io.Copy(io.Discard, c)
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-closed:
			f.cut.Add(1)
			return
		case <-f.stop:
			_ = c.Close()
			<-closed
			return
		case <-tick.C:
			_, _ = io.WriteString(c, "x")
		}
	}
}

func (f *slowFlood) end() {
	close(f.stop)
	f.wg.Wait()
}

// TestSlowClientsOnTheEmbeddedServer holds 1,000 slow connections to the
// embedded S3 listener (a request header sent a byte a second) through a
// whole life: provision, bind, a put and a get with the bound key, unbind,
// deprovision. Each succeeds as usual, since the broker's own calls do not
// go through the public listener, and the server cuts the slow clients.
func TestSlowClientsOnTheEmbeddedServer(t *testing.T) {
	const slow = 1000
	b := budgeted(t)
	b.Start()
	s3Addr := strings.TrimPrefix(b.Backend.S3, "http://")
	f := flood(s3Addr, slow)
	defer f.end()
	flooded := time.Now()
	for deadline := time.Now().Add(60 * time.Second); f.held.Load() < slow; {
		if time.Now().After(deadline) {
			t.Fatalf("%d slow connections held, want %d", f.held.Load(), slow)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// "Within the usual time": generous, for a loaded machine; without
	// the own listeners the provision failed after 60 s.
	const usual = 30 * time.Second
	step := func(name string, do func() error) {
		t.Helper()
		began := time.Now()
		if err := do(); err != nil {
			t.Fatalf("%s with %d slow connections held: %v", name, f.held.Load(), err)
		}
		if took := time.Since(began); took > usual {
			t.Errorf("%s took %v with %d slow connections held, want under %v", name, took.Round(time.Millisecond), f.held.Load(), usual)
		}
	}
	osb := func(method, path string, body any, want int) func() error {
		return func() error {
			if r := b.Do(method, path, body); r.Err != nil || r.Code != want {
				return &osbError{r.String(), want}
			}
			return nil
		}
	}
	inst := "/v2/service_instances/flooded"
	bind := inst + "/service_bindings/app"
	step("provision", osb("PUT", inst, provisionBody, http.StatusCreated))
	var c map[string]any
	step("bind", func() error {
		r := b.Do("PUT", bind, bindBody)
		if r.Err != nil || r.Code != http.StatusCreated {
			return &osbError{r.String(), http.StatusCreated}
		}
		c = r.Creds()
		return nil
	})
	ak, _ := c["access_key_id"].(string)
	sk, _ := c["secret_access_key"].(string)
	bucket, _ := c["bucket"].(string)
	app := s3.New(s3.Options{HTTPClient: sdkhttp.Client(nil), Region: "us-east-1", BaseEndpoint: aws.String(b.Backend.S3), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(ak, sk, ""), Retryer: aws.NopRetryer{}})
	ctx, cancel := context.WithTimeout(context.Background(), usual)
	defer cancel()
	step("put", func() error {
		_, err := app.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("k"), Body: strings.NewReader("v")})
		return err
	})
	step("get", func() error {
		out, err := app.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("k")})
		if err != nil {
			return err
		}
		defer out.Body.Close()
		body, err := io.ReadAll(out.Body)
		if err == nil && string(body) != "v" {
			t.Errorf("get: %q, want %q", body, "v")
		}
		return err
	})
	step("delete", func() error {
		_, err := app.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String("k")})
		return err
	})
	step("unbind", osb("DELETE", bind+deleteQuery, nil, http.StatusOK))
	step("deprovision", osb("DELETE", inst+deleteQuery, nil, http.StatusOK))
	// The server cuts them after its header timeout (10 s); before, none
	// was cut within 40 s.
	for f.cut.Load() < slow && time.Since(flooded) < 40*time.Second {
		time.Sleep(100 * time.Millisecond)
	}
	if n := f.cut.Load(); n < slow {
		t.Errorf("the server cut %d of the %d slow connections within %v", n, slow, time.Since(flooded).Round(time.Second))
	}
	t.Logf("slow connections held at the end: %d; cut by the server: %d", f.held.Load(), f.cut.Load())
}

type osbError struct {
	reply string
	want  int
}

func (e *osbError) Error() string { return e.reply + ", want " + http.StatusText(e.want) }
