package osb

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bucketbroker/bucketbroker/internal/engine"
)

const (
	testUser     = "broker"
	testPassword = "s3cret-Pa55word"
	testCatalog  = `{"services":[{"id":"svc","name":"s3","description":"buckets","bindable":true,"plans":[{"id":"plan","name":"std","description":"standard"}]}]}`
)

// errUnexpectedCall is what a fake method without a function answers; it
// maps to a 500, which fails any test that did not expect the call.
var errUnexpectedCall = errors.New("unexpected engine call")

// fakeEngine implements Instances and Bindings with function fields and
// records which methods were called.
type fakeEngine struct {
	provision             func(engine.ProvisionRequest) (engine.Result, error)
	update                func(engine.UpdateRequest) (engine.Result, error)
	deprovision           func(engine.DeprovisionRequest) (engine.Result, error)
	getInstance           func(instanceID string) (*engine.InstanceView, error)
	instanceLastOperation func(instanceID, operation string) (engine.LastOperation, error)
	bind                  func(engine.BindRequest) (engine.BindResult, error)
	unbind                func(engine.UnbindRequest) (engine.Result, error)
	getBinding            func(instanceID, bindingID string) (*engine.BindingView, error)
	bindingLastOperation  func(instanceID, bindingID, operation string) (engine.LastOperation, error)

	mu    sync.Mutex
	calls []string
}

var (
	_ Instances = (*fakeEngine)(nil)
	_ Bindings  = (*fakeEngine)(nil)
)

func (f *fakeEngine) record(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name)
}

func (f *fakeEngine) called() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeEngine) Provision(_ context.Context, r engine.ProvisionRequest) (engine.Result, error) {
	f.record("Provision")
	if f.provision == nil {
		return engine.Result{}, errUnexpectedCall
	}
	return f.provision(r)
}

func (f *fakeEngine) Update(_ context.Context, r engine.UpdateRequest) (engine.Result, error) {
	f.record("Update")
	if f.update == nil {
		return engine.Result{}, errUnexpectedCall
	}
	return f.update(r)
}

func (f *fakeEngine) Deprovision(_ context.Context, r engine.DeprovisionRequest) (engine.Result, error) {
	f.record("Deprovision")
	if f.deprovision == nil {
		return engine.Result{}, errUnexpectedCall
	}
	return f.deprovision(r)
}

func (f *fakeEngine) GetInstance(_ context.Context, instanceID string) (*engine.InstanceView, error) {
	f.record("GetInstance")
	if f.getInstance == nil {
		return nil, errUnexpectedCall
	}
	return f.getInstance(instanceID)
}

func (f *fakeEngine) InstanceLastOperation(_ context.Context, instanceID, operation string) (engine.LastOperation, error) {
	f.record("InstanceLastOperation")
	if f.instanceLastOperation == nil {
		return engine.LastOperation{}, errUnexpectedCall
	}
	return f.instanceLastOperation(instanceID, operation)
}

func (f *fakeEngine) Bind(_ context.Context, r engine.BindRequest) (engine.BindResult, error) {
	f.record("Bind")
	if f.bind == nil {
		return engine.BindResult{}, errUnexpectedCall
	}
	return f.bind(r)
}

func (f *fakeEngine) Unbind(_ context.Context, r engine.UnbindRequest) (engine.Result, error) {
	f.record("Unbind")
	if f.unbind == nil {
		return engine.Result{}, errUnexpectedCall
	}
	return f.unbind(r)
}

func (f *fakeEngine) GetBinding(_ context.Context, instanceID, bindingID string) (*engine.BindingView, error) {
	f.record("GetBinding")
	if f.getBinding == nil {
		return nil, errUnexpectedCall
	}
	return f.getBinding(instanceID, bindingID)
}

func (f *fakeEngine) BindingLastOperation(_ context.Context, instanceID, bindingID, operation string) (engine.LastOperation, error) {
	f.record("BindingLastOperation")
	if f.bindingLastOperation == nil {
		return engine.LastOperation{}, errUnexpectedCall
	}
	return f.bindingLastOperation(instanceID, bindingID, operation)
}

// captured hands what the fake engine saw on the server's goroutine to the
// test's goroutine.
type captured[T any] struct {
	mu sync.Mutex
	v  *T
}

func (c *captured[T]) set(v T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.v = &v
}

func (c *captured[T]) get() *T {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.v
}

// testBroker is a Handler behind a real HTTP server.
type testBroker struct {
	srv      *httptest.Server
	registry *prometheus.Registry
	logs     *syncBuffer
}

// newBroker starts a broker over f; modify adjusts the options.
func newBroker(t *testing.T, f *fakeEngine, modify ...func(*Options)) *testBroker {
	t.Helper()
	reg := prometheus.NewRegistry()
	logs := &syncBuffer{}
	opts := Options{
		Instances:  f,
		Bindings:   f,
		Catalog:    json.RawMessage(testCatalog),
		Username:   testUser,
		Password:   testPassword,
		Logger:     slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Registerer: reg,
		Gatherer:   reg,
	}
	for _, m := range modify {
		m(&opts)
	}
	h, err := NewHandler(opts)
	if err != nil {
		t.Fatalf("NewHandler: %v", err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &testBroker{srv: srv, registry: reg, logs: logs}
}

// request is what a test sends. Zero values mean: the right credentials,
// X-Broker-API-Version 2.17, no body.
type request struct {
	method, path, body string
	header             map[string]string
	// noAuth sends no Authorization header; user and password override the
	// right credentials.
	noAuth         bool
	user, password string
	// noVersion sends no X-Broker-API-Version header.
	noVersion bool
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// errorBody decodes an OSB error response.
func (r response) errorBody(t *testing.T) errorBody {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("error body %q is not JSON: %v", r.body, err)
	}
	return e
}

func (b *testBroker) do(t *testing.T, req request) response {
	t.Helper()
	var body io.Reader
	if req.body != "" {
		body = strings.NewReader(req.body)
	}
	hr, err := http.NewRequestWithContext(t.Context(), req.method, b.srv.URL+req.path, body)
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	if !req.noAuth {
		user, password := testUser, testPassword
		if req.user != "" || req.password != "" {
			user, password = req.user, req.password
		}
		hr.SetBasicAuth(user, password)
	}
	if !req.noVersion {
		hr.Header.Set(headerVersion, "2.17")
	}
	if req.body != "" {
		hr.Header.Set("Content-Type", "application/json")
	}
	for k, v := range req.header {
		hr.Header.Set(k, v)
	}
	res, err := b.srv.Client().Do(hr)
	if err != nil {
		t.Fatalf("%s %s: %v", req.method, req.path, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	if ct := res.Header.Get("Content-Type"); req.path != "/metrics" && req.method != http.MethodHead && ct != "application/json" {
		t.Errorf("%s %s: Content-Type = %q, want application/json", req.method, req.path, ct)
	}
	if req.method != http.MethodHead && req.path != "/metrics" && !json.Valid(data) {
		t.Errorf("%s %s: body %q is not JSON", req.method, req.path, data)
	}
	return response{status: res.StatusCode, header: res.Header, body: data}
}

// syncBuffer is a log sink that tests can read while the server writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// lines returns the JSON log records written so far.
func (s *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q is not JSON: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// Request bodies that pass validation.
const (
	provisionJSON = `{"service_id":"svc","plan_id":"plan","organization_guid":"org","space_guid":"space"}`
	bindJSON      = `{"service_id":"svc","plan_id":"plan"}`
	updateJSON    = `{"service_id":"svc"}`
)

// succeed returns a fake whose every call succeeds with outcome, so that a
// test can reach any endpoint.
func succeed(outcome engine.Outcome, operation string) *fakeEngine {
	res := engine.Result{Outcome: outcome, Operation: operation}
	creds := &engine.Credentials{Bucket: "b", AccessKeyID: "AKID", SecretAccessKey: "SECRET"}
	lastOp := engine.LastOperation{State: engine.OpSucceeded}
	return &fakeEngine{
		provision:   func(engine.ProvisionRequest) (engine.Result, error) { return res, nil },
		update:      func(engine.UpdateRequest) (engine.Result, error) { return res, nil },
		deprovision: func(engine.DeprovisionRequest) (engine.Result, error) { return res, nil },
		getInstance: func(string) (*engine.InstanceView, error) {
			return &engine.InstanceView{ServiceID: "svc", PlanID: "plan"}, nil
		},
		instanceLastOperation: func(string, string) (engine.LastOperation, error) { return lastOp, nil },
		bind: func(engine.BindRequest) (engine.BindResult, error) {
			return engine.BindResult{Result: res, Credentials: creds}, nil
		},
		unbind: func(engine.UnbindRequest) (engine.Result, error) { return res, nil },
		getBinding: func(string, string) (*engine.BindingView, error) {
			return &engine.BindingView{Credentials: creds}, nil
		},
		bindingLastOperation: func(string, string, string) (engine.LastOperation, error) { return lastOp, nil },
	}
}

// failing returns a fake whose every call fails with err.
func failing(err error) *fakeEngine {
	return &fakeEngine{
		provision:   func(engine.ProvisionRequest) (engine.Result, error) { return engine.Result{}, err },
		update:      func(engine.UpdateRequest) (engine.Result, error) { return engine.Result{}, err },
		deprovision: func(engine.DeprovisionRequest) (engine.Result, error) { return engine.Result{}, err },
		getInstance: func(string) (*engine.InstanceView, error) { return nil, err },
		instanceLastOperation: func(string, string) (engine.LastOperation, error) {
			return engine.LastOperation{}, err
		},
		bind:   func(engine.BindRequest) (engine.BindResult, error) { return engine.BindResult{}, err },
		unbind: func(engine.UnbindRequest) (engine.Result, error) { return engine.Result{}, err },
		getBinding: func(string, string) (*engine.BindingView, error) {
			return nil, err
		},
		bindingLastOperation: func(string, string, string) (engine.LastOperation, error) {
			return engine.LastOperation{}, err
		},
	}
}

// endpoints are one valid request per engine-calling endpoint.
var endpoints = []struct {
	name string
	req  request
}{
	{"provision", request{method: http.MethodPut, path: "/v2/service_instances/i1", body: provisionJSON}},
	{"update", request{method: http.MethodPatch, path: "/v2/service_instances/i1", body: updateJSON}},
	{"deprovision", request{method: http.MethodDelete, path: "/v2/service_instances/i1?service_id=svc&plan_id=plan"}},
	{"get instance", request{method: http.MethodGet, path: "/v2/service_instances/i1"}},
	{"instance last operation", request{method: http.MethodGet, path: "/v2/service_instances/i1/last_operation"}},
	{"bind", request{method: http.MethodPut, path: "/v2/service_instances/i1/service_bindings/b1", body: bindJSON}},
	{"unbind", request{method: http.MethodDelete, path: "/v2/service_instances/i1/service_bindings/b1?service_id=svc&plan_id=plan"}},
	{"get binding", request{method: http.MethodGet, path: "/v2/service_instances/i1/service_bindings/b1"}},
	{"binding last operation", request{method: http.MethodGet, path: "/v2/service_instances/i1/service_bindings/b1/last_operation"}},
}
