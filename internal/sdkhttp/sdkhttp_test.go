package sdkhttp_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"

	"github.com/bucketbroker/bucketbroker/internal/sdkhttp"
)

// TestBodyClosedBeforeItsWriteEnds makes the order of a loaded machine
// happen every time: the server answers a ListUsers page while the
// transport's writer is still inside the request's write, the SDK closes
// the request body as soon as the answer's headers are in, and only then
// does the writer finish. Through sdkhttp the page is read whole; through
// the SDK's client as it is, the transport closes the connection under the
// page being read (the control case: if it starts to pass, the SDK or Go
// no longer has the race and sdkhttp may go).
func TestBodyClosedBeforeItsWriteEnds(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil || r.PostForm.Get("Action") != "ListUsers" {
			http.Error(w, "want a ListUsers form", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/xml")
		_, _ = io.WriteString(w, listUsersPage(200)) // several read buffers long
	}))
	defer srv.Close()

	for _, tc := range []struct {
		name  string
		wrap  func(*http.Client) aws.HTTPClient
		fails bool
	}{
		{"sdkhttp", sdkhttp.Client, false},
		{"sdk client as it is", func(c *http.Client) aws.HTTPClient { return c }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStall()
			tr := http.DefaultTransport.(*http.Transport).Clone()
			dial := tr.DialContext
			tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
				c, err := dial(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return &stallConn{Conn: c, st: st}, nil
			}
			defer tr.CloseIdleConnections()
			c := iam.New(iam.Options{
				Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
				Credentials: credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""),
				Retryer:     aws.NopRetryer{},
				HTTPClient:  tc.wrap(&http.Client{Transport: spy{tr, st}}),
			})
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				WroteRequest: func(i httptrace.WroteRequestInfo) {
					if i.Err == nil {
						st.signal(st.wrote)
					}
				},
			})
			out, err := c.ListUsers(ctx, &iam.ListUsersInput{})
			switch {
			case tc.fails && err == nil:
				t.Fatal("the page was read whole: the race this package works around is gone")
			case tc.fails && !strings.Contains(err.Error(), "use of closed network connection"):
				t.Fatalf("failed otherwise than by the race: %v", err)
			case !tc.fails && err != nil:
				t.Fatalf("ListUsers: %v", err)
			case !tc.fails && len(out.Users) != 200:
				t.Fatalf("%d users, want 200", len(out.Users))
			}
		})
	}
}

// stall orders one request's events.
type stall struct {
	answerRead, wrote, connClosed chan struct{}
	once                          sync.Map // chan -> *sync.Once
}

func newStall() *stall {
	return &stall{answerRead: make(chan struct{}), wrote: make(chan struct{}), connClosed: make(chan struct{})}
}

func (s *stall) signal(ch chan struct{}) {
	o, _ := s.once.LoadOrStore(ch, new(sync.Once))
	o.(*sync.Once).Do(func() { close(ch) })
}

// wait returns when one of chs is closed, or after 10 s: a change in the
// transport's order makes the test fail, not hang.
func wait(chs ...chan struct{}) {
	timeout := time.After(10 * time.Second)
	done := make(chan struct{}, len(chs))
	for _, ch := range chs {
		go func() {
			select {
			case <-ch:
				done <- struct{}{}
			case <-timeout:
			}
		}()
	}
	select {
	case <-done:
	case <-timeout:
	}
}

// stallConn holds the transport's writer after it sent the request body
// until the SDK reads the answer, which it does after closing the request
// body.
type stallConn struct {
	net.Conn
	st     *stall
	writes int
}

func (c *stallConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if c.writes++; c.writes == 2 { // the header, then the body
		wait(c.st.answerRead)
	}
	return n, err
}

func (c *stallConn) Close() error {
	c.st.signal(c.st.connClosed)
	return c.Conn.Close()
}

// spy holds each read of the answer's body until the transport's writer has
// finished the request, or closed the connection.
type spy struct {
	next http.RoundTripper
	st   *stall
}

func (s spy) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(req)
	if err == nil {
		resp.Body = heldBody{resp.Body, s.st}
	}
	return resp, err
}

type heldBody struct {
	io.ReadCloser
	st *stall
}

func (b heldBody) Read(p []byte) (int, error) {
	b.st.signal(b.st.answerRead)
	wait(b.st.wrote, b.st.connClosed)
	return b.ReadCloser.Read(p)
}

func listUsersPage(n int) string {
	var b strings.Builder
	b.WriteString(`<ListUsersResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/"><ListUsersResult><IsTruncated>false</IsTruncated><Users>`)
	for i := range n {
		fmt.Fprintf(&b, `<member><Path>/</Path><UserName>user-%d</UserName><UserId>AIDA%016d</UserId><Arn>arn:aws:iam::000000000000:user/user-%d</Arn><CreateDate>2026-12-02T00:00:00Z</CreateDate></member>`, i, i, i)
	}
	b.WriteString(`</Users></ListUsersResult><ResponseMetadata><RequestId>r</RequestId></ResponseMetadata></ListUsersResponse>`)
	return b.String()
}
