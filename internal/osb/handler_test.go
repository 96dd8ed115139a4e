package osb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bucketbroker/bucketbroker/internal/engine"
)

func TestNewHandlerOptions(t *testing.T) {
	f := &fakeEngine{}
	valid := func() Options {
		return Options{Instances: f, Bindings: f, Catalog: json.RawMessage(testCatalog), Username: "u", Password: "p"}
	}
	cases := map[string]struct {
		reason  string
		modify  func(*Options)
		wantErr bool
	}{
		"valid":                {reason: "nil logger, registerer, gatherer and ready are fine", modify: func(*Options) {}},
		"no instances":         {reason: "nothing to call", modify: func(o *Options) { o.Instances = nil }, wantErr: true},
		"no bindings":          {reason: "nothing to call", modify: func(o *Options) { o.Bindings = nil }, wantErr: true},
		"no username":          {reason: "an open broker is a misconfiguration", modify: func(o *Options) { o.Username = "" }, wantErr: true},
		"no password":          {reason: "an open broker is a misconfiguration", modify: func(o *Options) { o.Password = "" }, wantErr: true},
		"no catalog":           {reason: "the catalog is served as is and must be a JSON object", modify: func(o *Options) { o.Catalog = nil }, wantErr: true},
		"catalog not JSON":     {reason: "the catalog must be a JSON object", modify: func(o *Options) { o.Catalog = json.RawMessage(`{"services":`) }, wantErr: true},
		"catalog an array":     {reason: "the catalog must be a JSON object", modify: func(o *Options) { o.Catalog = json.RawMessage(`[]`) }, wantErr: true},
		"negative body limit":  {reason: "a negative limit is a mistake", modify: func(o *Options) { o.MaxBodyBytes = -1 }, wantErr: true},
		"registered twice":     {reason: "a clash in the registry is reported", modify: func(o *Options) { o.Registerer = registeredOnce(t) }, wantErr: true},
		"registerer and limit": {reason: "a fresh registry takes the metrics", modify: func(o *Options) { o.Registerer = prometheus.NewRegistry(); o.MaxBodyBytes = 10 }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := valid()
			tc.modify(&o)
			_, err := NewHandler(o)
			if (err != nil) != tc.wantErr {
				t.Errorf("NewHandler error = %v, want error %v: %s", err, tc.wantErr, tc.reason)
			}
		})
	}
}

// registeredOnce returns a registry that already holds the handler metrics.
func registeredOnce(t *testing.T) prometheus.Registerer {
	reg := prometheus.NewRegistry()
	f := &fakeEngine{}
	if _, err := NewHandler(Options{Instances: f, Bindings: f, Catalog: json.RawMessage(testCatalog), Username: "u", Password: "p", Registerer: reg}); err != nil {
		t.Fatalf("first NewHandler: %v", err)
	}
	return reg
}

func TestAuthentication(t *testing.T) {
	cases := map[string]struct {
		reason string
		req    request
		want   int
	}{
		"missing": {
			reason: "no Authorization header",
			req:    request{noAuth: true},
			want:   http.StatusUnauthorized,
		},
		"wrong user": {
			reason: "the user name must match",
			req:    request{user: "admin", password: testPassword},
			want:   http.StatusUnauthorized,
		},
		"wrong password": {
			reason: "the password must match",
			req:    request{user: testUser, password: testPassword + "x"},
			want:   http.StatusUnauthorized,
		},
		"password prefix": {
			reason: "a prefix of the password is not the password",
			req:    request{user: testUser, password: testPassword[:3]},
			want:   http.StatusUnauthorized,
		},
		"bearer": {
			reason: "only basic auth is agreed",
			req:    request{noAuth: true, header: map[string]string{"Authorization": "Bearer " + testPassword}},
			want:   http.StatusUnauthorized,
		},
		"wrong password and no version": {
			reason: "authentication is checked before the version header",
			req:    request{user: testUser, password: "nope", noVersion: true},
			want:   http.StatusUnauthorized,
		},
		"right": {
			reason: "the right credentials pass",
			req:    request{},
			want:   http.StatusOK,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := succeed(engine.OutcomeOK, "")
			b := newBroker(t, f)
			for _, path := range []string{"/v2/catalog", "/v2/service_instances/i1"} {
				req := tc.req
				req.method, req.path = http.MethodGet, path
				res := b.do(t, req)
				if res.status != tc.want {
					t.Fatalf("GET %s: status = %d, want %d: %s", path, res.status, tc.want, tc.reason)
				}
				if tc.want != http.StatusUnauthorized {
					continue
				}
				if got := res.header.Get("WWW-Authenticate"); got != `Basic realm="bucketbroker"` {
					t.Errorf("GET %s: WWW-Authenticate = %q", path, got)
				}
				if res.errorBody(t).Description == "" {
					t.Errorf("GET %s: 401 without a description", path)
				}
			}
			if tc.want == http.StatusUnauthorized && len(f.called()) != 0 {
				t.Errorf("engine called without authentication: %v", f.called())
			}
		})
	}
}

func TestVersionHeader(t *testing.T) {
	cases := map[string]struct {
		reason  string
		version *string // nil: no header
		want    int
	}{
		"missing":     {reason: "conformance suites expect 412 without the header", version: nil, want: http.StatusPreconditionFailed},
		"empty":       {reason: "empty is missing", version: ptr(""), want: http.StatusPreconditionFailed},
		"2.12":        {reason: "older than 2.13", version: ptr("2.12"), want: http.StatusPreconditionFailed},
		"garbage":     {reason: "unparsable", version: ptr("latest"), want: http.StatusPreconditionFailed},
		"major only":  {reason: "MAJOR.MINOR is required", version: ptr("2"), want: http.StatusPreconditionFailed},
		"three parts": {reason: "MAJOR.MINOR is required", version: ptr("2.17.1"), want: http.StatusPreconditionFailed},
		"signed":      {reason: "digits only", version: ptr("2.+17"), want: http.StatusPreconditionFailed},
		"3.0":         {reason: "another major version may change anything", version: ptr("3.0"), want: http.StatusPreconditionFailed},
		"1.99":        {reason: "older major version", version: ptr("1.99"), want: http.StatusPreconditionFailed},
		"2.13":        {reason: "the oldest version accepted", version: ptr("2.13"), want: http.StatusOK},
		"2.17":        {reason: "the version implemented", version: ptr("2.17"), want: http.StatusOK},
		"2.18":        {reason: "minor versions are additive", version: ptr("2.18"), want: http.StatusOK},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := succeed(engine.OutcomeOK, "")
			b := newBroker(t, f)
			for _, path := range []string{"/v2/catalog", "/v2/service_instances/i1"} {
				req := request{method: http.MethodGet, path: path, noVersion: true}
				if tc.version != nil {
					req.header = map[string]string{headerVersion: *tc.version}
				}
				res := b.do(t, req)
				if res.status != tc.want {
					t.Fatalf("GET %s: status = %d (%s), want %d: %s", path, res.status, res.body, tc.want, tc.reason)
				}
				if tc.want == http.StatusPreconditionFailed && !strings.Contains(res.errorBody(t).Description, "2.13") {
					t.Errorf("GET %s: description %q does not say which version to use", path, res.errorBody(t).Description)
				}
			}
			if tc.want == http.StatusPreconditionFailed && len(f.called()) != 0 {
				t.Errorf("engine called despite a bad version: %v", f.called())
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestRequestIdentityEcho(t *testing.T) {
	cases := map[string]struct {
		reason string
		req    request
		want   int
	}{
		"success":      {reason: "echoed on an answer", req: request{method: http.MethodGet, path: "/v2/catalog"}, want: http.StatusOK},
		"unauthorized": {reason: "echoed on a 401", req: request{method: http.MethodGet, path: "/v2/catalog", noAuth: true}, want: http.StatusUnauthorized},
		"bad version":  {reason: "echoed on a 412", req: request{method: http.MethodGet, path: "/v2/catalog", noVersion: true}, want: http.StatusPreconditionFailed},
		"bad request": {
			reason: "echoed on a 400",
			req:    request{method: http.MethodDelete, path: "/v2/service_instances/i1"},
			want:   http.StatusBadRequest,
		},
		"engine error": {
			reason: "echoed on an engine error",
			req:    request{method: http.MethodGet, path: "/v2/service_instances/i1"},
			want:   http.StatusNotFound,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			const id = "7e5c4f58-3b0d-4a8e-9d2e-1f0c2b3a4d5e"
			tc.req.header = map[string]string{headerRequestIdentity: id}
			res := newBroker(t, failing(engine.ErrMissing)).do(t, tc.req)
			if res.status != tc.want {
				t.Fatalf("status = %d, want %d: %s", res.status, tc.want, tc.reason)
			}
			if got := res.header.Get(headerRequestIdentity); got != id {
				t.Errorf("%s = %q, want %q: %s", headerRequestIdentity, got, id, tc.reason)
			}
		})
	}
}

func TestCatalog(t *testing.T) {
	res := newBroker(t, &fakeEngine{}).do(t, request{method: http.MethodGet, path: "/v2/catalog"})
	if res.status != http.StatusOK || string(res.body) != testCatalog {
		t.Errorf("GET /v2/catalog = %d %s, want 200 and the configured catalog byte for byte", res.status, res.body)
	}
}

func TestRouting(t *testing.T) {
	cases := map[string]struct {
		reason    string
		req       request
		want      int
		wantAllow string
	}{
		"POST catalog": {
			reason: "catalog is GET only", req: request{method: http.MethodPost, path: "/v2/catalog"},
			want: http.StatusMethodNotAllowed, wantAllow: "GET, HEAD",
		},
		"POST instance": {
			reason: "instances take PUT, PATCH, DELETE, GET", req: request{method: http.MethodPost, path: "/v2/service_instances/i1", body: provisionJSON},
			want: http.StatusMethodNotAllowed, wantAllow: "PUT, PATCH, DELETE, GET, HEAD",
		},
		"PATCH binding": {
			reason: "bindings cannot be updated", req: request{method: http.MethodPatch, path: "/v2/service_instances/i1/service_bindings/b1", body: bindJSON},
			want: http.StatusMethodNotAllowed, wantAllow: "PUT, DELETE, GET, HEAD",
		},
		"DELETE last operation": {
			reason: "last_operation is GET only", req: request{method: http.MethodDelete, path: "/v2/service_instances/i1/last_operation"},
			want: http.StatusMethodNotAllowed, wantAllow: "GET, HEAD",
		},
		"POST healthz": {
			reason: "probes are GET only", req: request{method: http.MethodPost, path: "/healthz", noAuth: true},
			want: http.StatusMethodNotAllowed, wantAllow: "GET, HEAD",
		},
		"405 needs auth on /v2": {
			reason: "an unauthenticated caller learns nothing about /v2, not even its methods",
			req:    request{method: http.MethodPost, path: "/v2/catalog", noAuth: true},
			want:   http.StatusUnauthorized,
		},
		"unknown path": {
			reason: "404 with an OSB error body", req: request{method: http.MethodGet, path: "/v2/service_plans"},
			want: http.StatusNotFound,
		},
		"dot-dot id": {
			reason: "a non-canonical path is refused, not redirected to another resource",
			req:    request{method: http.MethodDelete, path: "/v2/service_instances/i1/service_bindings/..?service_id=svc&plan_id=plan"},
			want:   http.StatusBadRequest,
		},
		"double slash": {
			reason: "a non-canonical path is refused, not redirected",
			req:    request{method: http.MethodPut, path: "/v2//service_instances/i1", body: provisionJSON},
			want:   http.StatusBadRequest,
		},
		"trailing slash": {
			reason: "routes match exactly", req: request{method: http.MethodGet, path: "/v2/service_instances/i1/"},
			want: http.StatusNotFound,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := succeed(engine.OutcomeOK, "")
			res := newBroker(t, f).do(t, tc.req)
			if res.status != tc.want {
				t.Fatalf("status = %d (%s), want %d: %s", res.status, res.body, tc.want, tc.reason)
			}
			if got := res.header.Get("Allow"); got != tc.wantAllow {
				t.Errorf("Allow = %q, want %q", got, tc.wantAllow)
			}
			if res.errorBody(t).Description == "" {
				t.Errorf("no description in %s", res.body)
			}
			if len(f.called()) != 0 {
				t.Errorf("engine called: %v", f.called())
			}
		})
	}
}

func TestProbes(t *testing.T) {
	errDown := errors.New("store down at 10.0.0.7")
	cases := map[string]struct {
		reason   string
		ready    func(context.Context) error
		warnings []string
		path     string
		want     int
		wantBody string
	}{
		"healthz": {
			reason: "alive means 200, whatever the store does", ready: func(context.Context) error { return errDown },
			path: "/healthz", want: http.StatusOK, wantBody: `{"status":"ok"}`,
		},
		"readyz without check": {
			reason: "nil Ready is always ready",
			path:   "/readyz", want: http.StatusOK, wantBody: `{"status":"ok"}`,
		},
		"readyz ready": {
			reason: "Ready returning nil is 200", ready: func(context.Context) error { return nil },
			path: "/readyz", want: http.StatusOK, wantBody: `{"status":"ok"}`,
		},
		"readyz not ready": {
			reason: "Ready failing is 503, and the cause stays in the log", ready: func(context.Context) error { return errDown },
			path: "/readyz", want: http.StatusServiceUnavailable, wantBody: `{"status":"not ready"}`,
		},
		"readyz names the failed check": {
			reason: "a CheckError's name is shown, its cause is not",
			ready: func(context.Context) error {
				return fmt.Errorf("readiness: %w", &CheckError{Check: "store", Err: errDown})
			},
			path: "/readyz", want: http.StatusServiceUnavailable, wantBody: `{"status":"not ready","failed":"store"}`,
		},
		"readyz with a warning": {
			reason: "a warning shows in a ready answer and does not make it unready", ready: func(context.Context) error { return nil },
			warnings: []string{"1 record cannot be read"},
			path:     "/readyz", want: http.StatusOK, wantBody: `{"status":"ok","warnings":["1 record cannot be read"]}`,
		},
		"readyz has a deadline": {
			reason: "the check gets a context with a deadline",
			ready: func(ctx context.Context) error {
				if _, ok := ctx.Deadline(); !ok {
					return errors.New("no deadline")
				}
				return nil
			},
			path: "/readyz", want: http.StatusOK, wantBody: `{"status":"ok"}`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := newBroker(t, &fakeEngine{}, func(o *Options) {
				o.Ready = tc.ready
				if tc.warnings != nil {
					o.Warnings = func() []string { return tc.warnings }
				}
			})
			res := b.do(t, request{method: http.MethodGet, path: tc.path, noAuth: true, noVersion: true})
			if res.status != tc.want || string(res.body) != tc.wantBody {
				t.Errorf("GET %s = %d %s, want %d %s: %s", tc.path, res.status, res.body, tc.want, tc.wantBody, tc.reason)
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	b := newBroker(t, succeed(engine.OutcomeCreated, ""))
	b.do(t, request{method: http.MethodGet, path: "/v2/catalog"})
	b.do(t, request{method: http.MethodPut, path: "/v2/service_instances/i1", body: provisionJSON})
	b.do(t, request{method: http.MethodPut, path: "/v2/service_instances/i2", body: provisionJSON})
	b.do(t, request{method: http.MethodGet, path: "/v2/catalog", noAuth: true})
	b.do(t, request{method: "BREW", path: "/v2/catalog"})
	b.do(t, request{method: http.MethodGet, path: "/no/such/path"})

	res := b.do(t, request{method: http.MethodGet, path: "/metrics", noAuth: true, noVersion: true})
	if res.status != http.StatusOK {
		t.Fatalf("GET /metrics = %d", res.status)
	}
	text := string(res.body)
	for _, want := range []string{
		`bucketbroker_http_requests_total{code="200",endpoint="/v2/catalog",method="GET"} 1`,
		`bucketbroker_http_requests_total{code="401",endpoint="/v2/catalog",method="GET"} 1`,
		`bucketbroker_http_requests_total{code="201",endpoint="/v2/service_instances/{instance_id}",method="PUT"} 2`,
		`bucketbroker_http_requests_total{code="405",endpoint="/v2/catalog",method="OTHER"} 1`,
		`bucketbroker_http_requests_total{code="404",endpoint="unmatched",method="GET"} 1`,
		`bucketbroker_http_request_duration_seconds_count{endpoint="/v2/service_instances/{instance_id}",method="PUT"} 2`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	for _, raw := range []string{"i1", "i2", "/no/such/path", "BREW"} {
		if strings.Contains(text, `"`+raw+`"`) || strings.Contains(text, "/v2/service_instances/"+raw) {
			t.Errorf("metrics contain the raw value %q as a label", raw)
		}
	}
}

func TestMetricsWithoutGatherer(t *testing.T) {
	b := newBroker(t, &fakeEngine{}, func(o *Options) { o.Gatherer = nil })
	res := b.do(t, request{method: http.MethodGet, path: "/healthz", noAuth: true})
	if res.status != http.StatusOK {
		t.Fatalf("GET /healthz = %d", res.status)
	}
	hr, err := http.Get(b.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	hr.Body.Close()
	if hr.StatusCode != http.StatusNotFound {
		t.Errorf("GET /metrics without a gatherer = %d, want 404", hr.StatusCode)
	}
}

func TestLogging(t *testing.T) {
	const identity = "req-42"
	cases := map[string]struct {
		reason    string
		fake      *fakeEngine
		req       request
		wantLevel string
		want      map[string]any
	}{
		"provision created": {
			reason:    "a success is one INFO line with route, ids, status and request identity",
			fake:      succeed(engine.OutcomeCreated, ""),
			req:       request{method: http.MethodPut, path: "/v2/service_instances/i1", body: provisionJSON},
			wantLevel: "INFO",
			want: map[string]any{
				"method": "PUT", "route": "/v2/service_instances/{instance_id}", "status": float64(201),
				"instance_id": "i1", "request_identity": identity,
			},
		},
		"bind conflict": {
			reason:    "a 409 is a normal answer, not an error",
			fake:      failing(engine.ErrConflict),
			req:       request{method: http.MethodPut, path: "/v2/service_instances/i1/service_bindings/b1", body: bindJSON},
			wantLevel: "INFO",
			want: map[string]any{
				"route": "/v2/service_instances/{instance_id}/service_bindings/{binding_id}", "status": float64(409),
				"instance_id": "i1", "binding_id": "b1", "error": engine.ErrConflict.Error(),
			},
		},
		"deprovision gone": {
			reason:    "a 410 is a normal answer",
			fake:      failing(engine.ErrGone),
			req:       endpointRequest(t, "deprovision"),
			wantLevel: "INFO",
			want:      map[string]any{"status": float64(410)},
		},
		"concurrency": {
			reason:    "a 422 is a normal answer",
			fake:      failing(engine.ErrConcurrency),
			req:       endpointRequest(t, "update"),
			wantLevel: "INFO",
			want:      map[string]any{"status": float64(422)},
		},
		"internal error": {
			reason:    "a 5xx is an ERROR line carrying the cause the platform did not get",
			fake:      failing(errors.New("disk on fire")),
			req:       endpointRequest(t, "provision"),
			wantLevel: "ERROR",
			want:      map[string]any{"status": float64(500), "error": "disk on fire"},
		},
		"unavailable": {
			reason:    "a 503 is an ERROR line",
			fake:      failing(engine.ErrUnavailable),
			req:       endpointRequest(t, "get instance"),
			wantLevel: "ERROR",
			want:      map[string]any{"status": float64(503)},
		},
		"unauthorized": {
			reason:    "a 401 is logged like any answer",
			fake:      &fakeEngine{},
			req:       request{method: http.MethodGet, path: "/v2/catalog", user: testUser, password: "guess"},
			wantLevel: "INFO",
			want:      map[string]any{"status": float64(401), "route": "/v2/catalog"},
		},
		"healthy probe": {
			reason:    "probes are DEBUG while healthy",
			fake:      &fakeEngine{},
			req:       request{method: http.MethodGet, path: "/healthz", noAuth: true},
			wantLevel: "DEBUG",
			want:      map[string]any{"status": float64(200), "route": "/healthz"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := newBroker(t, tc.fake)
			req := tc.req
			req.header = map[string]string{
				headerRequestIdentity:     identity,
				headerOriginatingIdentity: "cloudfoundry eyJ1c2VyX2lkIjoiZm9vIn0=",
			}
			b.do(t, req)
			lines := b.logs.lines(t)
			if len(lines) != 1 {
				t.Fatalf("got %d log lines, want exactly 1: %s", len(lines), b.logs.String())
			}
			got := lines[0]
			if got["level"] != tc.wantLevel {
				t.Errorf("level = %v, want %s: %s", got["level"], tc.wantLevel, tc.reason)
			}
			for k, v := range tc.want {
				if diff := cmp.Diff(v, got[k]); diff != "" {
					t.Errorf("log field %s (-want +got):\n%s\nreason: %s", k, diff, tc.reason)
				}
			}
			if _, ok := got["duration"]; !ok {
				t.Errorf("log line has no duration")
			}
			text := b.logs.String()
			for _, secret := range []string{testPassword, "Authorization", "Basic ", "organization_guid", "eyJ1c2VyX2lkIjoiZm9vIn0="} {
				if strings.Contains(text, secret) {
					t.Errorf("log line contains %q: %s", secret, text)
				}
			}
		})
	}
}

func TestBindCredentialsNeverLogged(t *testing.T) {
	b := newBroker(t, succeed(engine.OutcomeCreated, ""))
	res := b.do(t, endpointRequest(t, "bind"))
	if res.status != http.StatusCreated || !strings.Contains(string(res.body), "SECRET") {
		t.Fatalf("bind = %d %s, want 201 with credentials", res.status, res.body)
	}
	if strings.Contains(b.logs.String(), "SECRET") || strings.Contains(b.logs.String(), "AKID") {
		t.Errorf("credentials in the log: %s", b.logs.String())
	}
}

func TestPanicIsA500(t *testing.T) {
	f := &fakeEngine{getInstance: func(string) (*engine.InstanceView, error) { panic("engine bug") }}
	b := newBroker(t, f)
	res := b.do(t, endpointRequest(t, "get instance"))
	if res.status != http.StatusInternalServerError || res.errorBody(t).Description != internalDescription {
		t.Errorf("status = %d %s, want 500 with the generic description", res.status, res.body)
	}
	lines := b.logs.lines(t)
	if len(lines) != 1 || lines[0]["level"] != "ERROR" || !strings.Contains(lines[0]["error"].(string), "engine bug") {
		t.Errorf("want one ERROR line naming the panic, got %s", b.logs.String())
	}
}
