package osb

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bucketbroker/bucketbroker/internal/engine"
)

// Instances is the part of the engine that keeps service instances.
type Instances interface {
	Provision(ctx context.Context, r engine.ProvisionRequest) (engine.Result, error)
	Update(ctx context.Context, r engine.UpdateRequest) (engine.Result, error)
	Deprovision(ctx context.Context, r engine.DeprovisionRequest) (engine.Result, error)
	GetInstance(ctx context.Context, instanceID string) (*engine.InstanceView, error)
	InstanceLastOperation(ctx context.Context, instanceID, operation string) (engine.LastOperation, error)
}

// Bindings is the part of the engine that keeps service bindings.
type Bindings interface {
	Bind(ctx context.Context, r engine.BindRequest) (engine.BindResult, error)
	Unbind(ctx context.Context, r engine.UnbindRequest) (engine.Result, error)
	GetBinding(ctx context.Context, instanceID, bindingID string) (*engine.BindingView, error)
	BindingLastOperation(ctx context.Context, instanceID, bindingID, operation string) (engine.LastOperation, error)
}

// Options configure a Handler.
type Options struct {
	Instances Instances
	Bindings  Bindings
	// Catalog is the full GET /v2/catalog body, served as is.
	Catalog json.RawMessage
	// Username and Password are the basic-auth credentials every /v2
	// request must carry. Both are required.
	Username, Password string
	// Logger receives one line per request; nil discards.
	Logger *slog.Logger
	// Registerer receives the HTTP metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Gatherer is served on /metrics; nil leaves /metrics unrouted (404).
	Gatherer prometheus.Gatherer
	// Ready answers /readyz; nil means always ready. A failure wrapped in a
	// CheckError names its check in the answer (the cause goes to the log
	// only).
	Ready func(ctx context.Context) error
	// Warnings, if set, are shown in a ready /readyz answer: conditions an
	// operator must act on that do not stop this replica from serving
	// (a record the store cannot read). /readyz is unauthenticated: they
	// must not name ids or carry causes.
	Warnings func() []string
	// MaxBodyBytes limits request bodies; zero means 1 MiB.
	MaxBodyBytes int64
}

const (
	defaultMaxBodyBytes = 1 << 20

	headerVersion             = "X-Broker-API-Version"
	headerOriginatingIdentity = "X-Broker-API-Originating-Identity"
	headerRequestIdentity     = "X-Broker-API-Request-Identity"

	// readyTimeout bounds a /readyz check, so that a hung store does not pile
	// up probe goroutines.
	readyTimeout = 5 * time.Second

	// maxLoggedValue caps client-chosen strings (ids, request identity) in
	// log lines.
	maxLoggedValue = 256
)

// The header names in the form net/http keeps header keys in: Get and Set
// with another form convert the name, which allocates, on every call.
var (
	keyVersion             = http.CanonicalHeaderKey(headerVersion)
	keyOriginatingIdentity = http.CanonicalHeaderKey(headerOriginatingIdentity)
	keyRequestIdentity     = http.CanonicalHeaderKey(headerRequestIdentity)
)

// Route patterns. They double as the endpoint label of the metrics, which
// keeps its cardinality bounded.
const (
	routeCatalog        = "/v2/catalog"
	routeInstance       = "/v2/service_instances/{instance_id}"
	routeInstanceLastOp = "/v2/service_instances/{instance_id}/last_operation"
	routeBinding        = "/v2/service_instances/{instance_id}/service_bindings/{binding_id}"
	routeBindingLastOp  = "/v2/service_instances/{instance_id}/service_bindings/{binding_id}/last_operation"
	routeHealthz        = "/healthz"
	routeReadyz         = "/readyz"
	routeMetrics        = "/metrics"
	routeUnmatched      = "unmatched"
)

// Handler serves the Open Service Broker API v2.17 and the health, readiness
// and metrics endpoints. It is safe for concurrent use.
type Handler struct {
	mux       *http.ServeMux
	instances Instances
	bindings  Bindings
	catalog   []byte
	// userHash and passHash are SHA-256 digests of the credentials, so that
	// comparing fixed-length digests in constant time leaks neither the
	// content nor the length of the secrets.
	userHash, passHash [sha256.Size]byte
	log                *slog.Logger
	ready              func(ctx context.Context) error
	warnings           func() []string
	maxBody            int64
	metrics            *metrics
}

// NewHandler returns a Handler for opts.
func NewHandler(opts Options) (*Handler, error) {
	if opts.Instances == nil || opts.Bindings == nil {
		return nil, errors.New("new OSB handler: instances and bindings are required")
	}
	if opts.Username == "" || opts.Password == "" {
		return nil, errors.New("new OSB handler: username and password are required")
	}
	if !isJSONObject(opts.Catalog) {
		return nil, errors.New("new OSB handler: catalog must be a JSON object")
	}
	if opts.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("new OSB handler: max body bytes %d is negative", opts.MaxBodyBytes)
	}
	h := &Handler{
		mux:       http.NewServeMux(),
		instances: opts.Instances,
		bindings:  opts.Bindings,
		catalog:   append([]byte(nil), opts.Catalog...),
		userHash:  sha256.Sum256([]byte(opts.Username)),
		passHash:  sha256.Sum256([]byte(opts.Password)),
		log:       opts.Logger,
		ready:     opts.Ready,
		warnings:  opts.Warnings,
		maxBody:   opts.MaxBodyBytes,
		metrics:   newMetrics(),
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.maxBody == 0 {
		h.maxBody = defaultMaxBodyBytes
	}
	if opts.Registerer != nil {
		if err := h.metrics.register(opts.Registerer); err != nil {
			return nil, fmt.Errorf("new OSB handler: %w", err)
		}
	}
	h.routes(opts.Gatherer)
	return h, nil
}

func isJSONObject(b []byte) bool {
	var v map[string]json.RawMessage
	return json.Unmarshal(b, &v) == nil && v != nil
}

type endpoint struct {
	method string
	serve  http.HandlerFunc
}

func (h *Handler) routes(gatherer prometheus.Gatherer) {
	v2 := []struct {
		path      string
		endpoints []endpoint
	}{
		{routeCatalog, []endpoint{{http.MethodGet, h.serveCatalog}}},
		{routeInstance, []endpoint{
			{http.MethodPut, changing(h, decodeProvision, h.instances.Provision, http.StatusCreated)},
			{http.MethodPatch, changing(h, decodeUpdate, h.instances.Update, http.StatusOK)},
			{http.MethodDelete, changing(h, decodeDeprovision, h.instances.Deprovision, http.StatusOK)},
			{http.MethodGet, h.getInstance},
		}},
		{routeInstanceLastOp, []endpoint{{http.MethodGet, h.instanceLastOperation}}},
		{routeBinding, []endpoint{
			{http.MethodPut, h.bind},
			{http.MethodDelete, changing(h, decodeUnbind, h.bindings.Unbind, http.StatusOK)},
			{http.MethodGet, h.getBinding},
		}},
		{routeBindingLastOp, []endpoint{{http.MethodGet, h.bindingLastOperation}}},
	}
	for _, route := range v2 {
		for _, e := range route.endpoints {
			h.mux.Handle(e.method+" "+route.path, h.osb(e.serve))
		}
		// The method-less pattern catches every other method, because a
		// pattern with a method is more specific than one without.
		h.mux.Handle(route.path, h.osb(h.methodNotAllowed(route.endpoints)))
	}

	probes := map[string]http.Handler{
		routeHealthz: http.HandlerFunc(h.healthz),
		routeReadyz:  http.HandlerFunc(h.readyz),
	}
	if gatherer != nil {
		probes[routeMetrics] = promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{})
	}
	for path, serve := range probes {
		h.mux.Handle(http.MethodGet+" "+path, serve)
		h.mux.Handle(path, h.methodNotAllowed([]endpoint{{method: http.MethodGet}}))
	}

	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		h.fail(w, r, &requestError{status: http.StatusNotFound, description: "no such endpoint"})
	})
}

// ServeHTTP limits the body, routes the request, and records exactly one log
// line and one metric sample for it, whatever the route does.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w}
	info := &rec.info
	if r.Body != nil {
		// Wrapped with the server's own writer, so that net/http closes the
		// connection after an oversized body instead of draining it.
		r.Body = http.MaxBytesReader(w, r.Body, h.maxBody)
	}
	defer func() {
		if p := recover(); p != nil {
			// A panic value, not an error chain: compared as net/http's own
			// server compares it.
			if p == http.ErrAbortHandler { //nolint:errorlint // see above
				panic(p)
			}
			info.panicked = true
			info.err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
			if rec.status == 0 {
				writeJSON(rec, http.StatusInternalServerError, errorBody{Description: internalDescription})
			}
		}
		h.observe(r, rec.statusCode(), time.Since(start), info)
	}()
	if p := r.URL.Path; p != cleanPath(p) {
		// ServeMux would redirect, with an HTML body, to the cleaned path. No
		// platform sends such paths, and a redirected PUT or DELETE could act
		// on another resource than the one named, so refuse instead.
		h.fail(rec, r, badRequest("request path is not in canonical form"))
		return
	}
	h.mux.ServeHTTP(rec, r)
}

// cleanPath is the canonical form of p as ServeMux computes it: rooted,
// without "." and ".." elements or repeated slashes, with a trailing slash
// kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// osb wraps a /v2 endpoint with what the OSB spec asks of every request:
// the request identity echo, basic auth, then the version header.
//
// Authentication comes first: an unauthenticated caller learns nothing about
// the broker, not even which API versions it speaks. The spec makes the 401 a
// MUST and the 412 a MAY, and the reference Go broker library (brokerapi)
// runs its auth middleware before its version middleware too.
func (h *Handler) osb(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get(keyRequestIdentity); id != "" {
			w.Header().Set(keyRequestIdentity, id)
		}
		if !h.authenticated(r) {
			w.Header().Set("WWW-Authenticate", `Basic realm="bucketbroker"`)
			h.fail(w, r, &requestError{status: http.StatusUnauthorized, description: "authentication required"})
			return
		}
		if err := checkVersion(r.Header.Get(keyVersion)); err != nil {
			h.fail(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (h *Handler) authenticated(r *http.Request) bool {
	user, pass, ok := r.BasicAuth()
	if !ok {
		return false
	}
	u := sha256.Sum256([]byte(user))
	p := sha256.Sum256([]byte(pass))
	// Both comparisons always run, so timing does not tell which one failed.
	return subtle.ConstantTimeCompare(u[:], h.userHash[:])&subtle.ConstantTimeCompare(p[:], h.passHash[:]) == 1
}

func (h *Handler) methodNotAllowed(endpoints []endpoint) http.Handler {
	var allow []string
	for _, e := range endpoints {
		allow = append(allow, e.method)
		if e.method == http.MethodGet {
			allow = append(allow, http.MethodHead)
		}
	}
	allowed := strings.Join(allow, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allowed)
		h.fail(w, r, &requestError{
			status:      http.StatusMethodNotAllowed,
			description: "method not allowed; this endpoint accepts " + allowed,
		})
	})
}

func (h *Handler) serveCatalog(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(h.catalog)
}

func (h *Handler) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, statusBody{Status: "ok"})
}

func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	if h.ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		err := h.ready(ctx)
		h.metrics.observeReadiness(err)
		if err != nil {
			// The cause goes to the log only: /readyz is unauthenticated.
			// The name of the failed check is no secret, and tells an
			// operator (or a probe's event) where to look.
			noteError(w, fmt.Errorf("readiness check: %w", err))
			body := statusBody{Status: "not ready"}
			if ce := (*CheckError)(nil); errors.As(err, &ce) {
				body.Failed = ce.Check
			}
			writeJSON(w, http.StatusServiceUnavailable, body)
			return
		}
	}
	body := statusBody{Status: "ok"}
	if h.warnings != nil {
		body.Warnings = h.warnings()
	}
	writeJSON(w, http.StatusOK, body)
}

type statusBody struct {
	Status   string   `json:"status"`
	Failed   string   `json:"failed,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
}

// CheckError is a readiness check's failure: Check names what failed
// ("store", "storage backend") and is shown in the /readyz answer; Err is
// the cause, which is logged only.
type CheckError struct {
	Check string
	Err   error
}

func (e *CheckError) Error() string { return e.Check + ": " + e.Err.Error() }

func (e *CheckError) Unwrap() error { return e.Err }

// requestInfo carries what the route learned back to the log line.
type requestInfo struct {
	err      error
	panicked bool
}

// noteError hands err to the request's log line. It travels with the
// writer ServeHTTP gave the route (not in the request's context, which
// would cost a copy of the request per request).
func noteError(w http.ResponseWriter, err error) {
	if rec, ok := w.(*statusRecorder); ok {
		rec.info.err = err
	}
}

// statusRecorder remembers the status code a route answered with, and what
// the route learned for the log line.
type statusRecorder struct {
	http.ResponseWriter
	status int
	info   requestInfo
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the server's writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusRecorder) statusCode() int {
	if s.status == 0 {
		return http.StatusOK
	}
	return s.status
}

// observe writes the request's log line and metric samples.
func (h *Handler) observe(r *http.Request, status int, d time.Duration, info *requestInfo) {
	route := routeOf(r)
	method := metricMethod(r.Method)
	h.metrics.observe(route, method, status, d)

	level := slog.LevelInfo
	switch {
	case status >= 500:
		level = slog.LevelError
	case route == routeHealthz || route == routeReadyz || route == routeMetrics:
		// Probes arrive every few seconds; a healthy answer is not news.
		level = slog.LevelDebug
	}
	ctx := r.Context()
	if !h.log.Enabled(ctx, level) {
		return
	}
	// Room for every attribute up front, so that the slice is built once.
	attrs := make([]slog.Attr, 4, 8)
	attrs[0] = slog.String("method", method)
	attrs[1] = slog.String("route", route)
	attrs[2] = slog.Int("status", status)
	attrs[3] = slog.Duration("duration", d)
	if v := r.PathValue("instance_id"); v != "" {
		attrs = append(attrs, slog.String("instance_id", truncate(v)))
	}
	if v := r.PathValue("binding_id"); v != "" {
		attrs = append(attrs, slog.String("binding_id", truncate(v)))
	}
	if v := r.Header.Get(keyRequestIdentity); v != "" {
		attrs = append(attrs, slog.String("request_identity", truncate(v)))
	}
	if info.err != nil {
		attrs = append(attrs, slog.String("error", info.err.Error()))
	}
	msg := "Served request"
	if info.panicked {
		msg = "Recovered from panic while serving request"
	}
	// The record is made here rather than by LogAttrs, which looks up the
	// caller's program counter on every call (runtime.Callers) for
	// handlers that report the source: none here does, and this line's
	// source would always be this function.
	rec := slog.NewRecord(time.Now(), level, msg, 0)
	rec.AddAttrs(attrs...)
	_ = h.log.Handler().Handle(ctx, rec)
}

// routeOf returns the path pattern the request matched, without its method.
func routeOf(r *http.Request) string {
	p := r.Pattern
	if _, path, ok := strings.Cut(p, " "); ok {
		p = path
	}
	if p == "" || p == "/" {
		return routeUnmatched
	}
	return p
}

func truncate(s string) string {
	if len(s) > maxLoggedValue {
		return s[:maxLoggedValue] + "..."
	}
	return s
}
