package osbclient_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/osbclient"
)

// The answers below are what brokers send that bucketbroker does not:
// canned bodies, served over real HTTP, for the client's decoding.

func canned(t *testing.T, status int, body string) *osbclient.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	c, err := osbclient.New(osbclient.Config{URL: srv.URL, Username: "u", Password: "p", MaxResponseBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ptr(b bool) *bool { return &b }

func TestErrorDecoding(t *testing.T) {
	long := strings.Repeat("é", 2000)
	for name, tc := range map[string]struct {
		reason string
		status int
		body   string
		want   osbclient.Error
	}{
		"concurrency": {"the spec's code and description", 422,
			`{"error":"ConcurrencyError","description":"busy"}`,
			osbclient.Error{Status: 422, Code: "ConcurrencyError", Description: "busy"}},
		"update flags": {"instance_usable and update_repeatable of a failed update", 400,
			`{"description":"no","instance_usable":false,"update_repeatable":true}`,
			osbclient.Error{Status: 400, Description: "no", InstanceUsable: ptr(false), UpdateRepeatable: ptr(true)}},
		"html": {"a proxy's page is kept as text", 502,
			"  <html>bad gateway</html>\n",
			osbclient.Error{Status: 502, Description: "<html>bad gateway</html>"}},
		"empty": {"no body at all", 500, "",
			osbclient.Error{Status: 500}},
		"long": {"a description is cut on a rune boundary", 500,
			`{"description":"` + long + `"}`,
			osbclient.Error{Status: 500, Description: long[:1024] + "…"}},
		"redirect": {"a redirect is not followed (the credentials would go along)", 307, "",
			osbclient.Error{Status: 307}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := canned(t, tc.status, tc.body).Provision(context.Background(), "i", osbclient.ProvisionRequest{ServiceID: "s", PlanID: "p"})
			var got *osbclient.Error
			if !errors.As(err, &got) {
				t.Fatalf("%s: got %v, want an *Error", tc.reason, err)
			}
			tc.want.Method, tc.want.Path = http.MethodPut, "/v2/service_instances/i"
			if diff := cmp.Diff(&tc.want, got); diff != "" {
				t.Fatalf("%s (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
}

func TestNoAnswer(t *testing.T) {
	for name, tc := range map[string]struct {
		reason string
		status int
		body   string
		is     error
	}{
		"too large": {"a body over the limit is refused, not cut", 200, `{"x":"` + strings.Repeat("a", 5000) + `"}`, osbclient.ErrResponseTooLarge},
		"not JSON":  {"a success that is not JSON", 201, "created!", nil},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := canned(t, tc.status, tc.body).Provision(context.Background(), "i", osbclient.ProvisionRequest{})
			if err == nil || osbclient.Answered(err) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Fatalf("%s: got %v", tc.reason, err)
			}
		})
	}
	t.Run("bad state", func(t *testing.T) {
		_, err := canned(t, 200, `{"state":"done"}`).InstanceLastOperation(context.Background(), "i", osbclient.PollRequest{})
		if !osbclient.IsStatus(err, 200) || !strings.Contains(err.Error(), `"done"`) {
			t.Fatalf("a last_operation state outside the spec: %v", err)
		}
	})
}

func TestDeadlineWithoutContextDeadline(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer srv.Close()
	c, err := osbclient.New(osbclient.Config{URL: srv.URL, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// context.Background has no deadline: Config.Timeout must bound the
	// call, or this test hangs until the test binary's own timeout.
	_, err = c.Catalog(context.Background())
	if !errors.Is(err, context.DeadlineExceeded) || osbclient.Answered(err) {
		t.Fatalf("got %v, want a deadline error that is no answer", err)
	}
}

func TestRequestShape(t *testing.T) {
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(`{"operation":"op 1"}`))
	}))
	defer srv.Close()
	c, err := osbclient.New(osbclient.Config{URL: srv.URL + "/base/", Username: "u", Password: "p"})
	if err != nil {
		t.Fatal(err)
	}
	req := osbclient.DeleteRequest{ServiceID: "s", PlanID: "p&x", Call: osbclient.Call{AcceptsIncomplete: true, Identity: "cloudfoundry eyJ1c2VyX2lkIjoiMSJ9"}}
	r, err := c.Unbind(context.Background(), "a/b c", "ü", req)
	if err != nil || r.Operation != "op 1" || !r.Async() {
		t.Fatalf("unbind: %+v %v", r, err)
	}
	u, p, _ := got.BasicAuth()
	if diff := cmp.Diff(map[string]string{
		"path":     "/base/v2/service_instances/a%2Fb%20c/service_bindings/%C3%BC",
		"query":    "accepts_incomplete=true&plan_id=p%26x&service_id=s",
		"version":  "2.17",
		"identity": "cloudfoundry eyJ1c2VyX2lkIjoiMSJ9",
		"auth":     "u:p",
	}, map[string]string{
		"path":     got.URL.EscapedPath(),
		"query":    got.URL.RawQuery,
		"version":  got.Header.Get("X-Broker-API-Version"),
		"identity": got.Header.Get("X-Broker-API-Originating-Identity"),
		"auth":     u + ":" + p,
	}); diff != "" {
		t.Fatalf("request (-want +got):\n%s", diff)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	for name, cfg := range map[string]osbclient.Config{
		"no scheme":   {URL: "broker.example:8080"},
		"ftp":         {URL: "ftp://broker.example"},
		"user info":   {URL: "https://u:secret@broker.example"},
		"query":       {URL: "https://broker.example/?x=1"},
		"negative":    {URL: "https://broker.example", Timeout: -1},
		"missing CA":  {URL: "https://broker.example", TLS: osbclient.TLSOptions{CAFile: "/nonexistent/ca.crt"}},
		"no host":     {URL: "http://"},
		"unparseable": {URL: "http://[::1"},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := osbclient.New(cfg)
			if err == nil || c != nil {
				t.Fatalf("New(%+v) = %v, %v; want an error", cfg, c, err)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Fatalf("the error shows the password: %v", err)
			}
		})
	}
}

func TestBindingPrintsNoCredentials(t *testing.T) {
	c := canned(t, http.StatusCreated, `{"credentials":{"password":"s3cr3t-value"}}`)
	b, err := c.Bind(context.Background(), "i", "b", osbclient.BindRequest{ServiceID: "s", PlanID: "p"})
	if err != nil || !strings.Contains(string(b.Credentials), "s3cr3t-value") {
		t.Fatalf("bind: %v", err)
	}
	var logged strings.Builder
	slog.New(slog.NewTextHandler(&logged, nil)).Info("Bound", "binding", b)
	for _, s := range []string{fmt.Sprint(b), fmt.Sprintf("%+v", b), fmt.Sprintf("%v", *b), logged.String()} {
		// A struct printed without String shows a json.RawMessage as
		// numbers, so look for the mark of String instead.
		if strings.Contains(s, "s3cr3t") || !strings.Contains(s, "redacted") {
			t.Fatalf("printed: %s", s)
		}
	}
}
