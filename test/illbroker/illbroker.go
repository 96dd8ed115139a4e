package illbroker

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/osbapi"
)

// The catalog's service and plans. PlanSync provisions and deprovisions
// synchronously; PlanAsync only asynchronously (422 AsyncRequired without
// accepts_incomplete=true), each operation lasting Config.AsyncDelay.
const (
	ServiceID = "1111aaaa-0000-4000-8000-000000000001"
	PlanSync  = "1111aaaa-0000-4000-8000-000000000011"
	PlanAsync = "1111aaaa-0000-4000-8000-000000000012"
)

// MaintenanceVersion is PlanSync's maintenance_info.version (PlanAsync has
// none).
const MaintenanceVersion = "1.0.0"

// StatePath is the inspection endpoint: GET answers State as JSON, without
// auth and never failing on purpose.
const StatePath = "/illbroker/state"

// Config sets how badly the broker behaves. Its zero value behaves well
// except for the duplicate answers, which are always wrong.
type Config struct {
	// Username and Password are the basic-auth credentials it requires.
	Username, Password string
	// Seed seeds every random choice: the same requests in the same order
	// meet the same failures.
	Seed uint64
	// AsyncDelay is how long an asynchronous operation stays in progress.
	AsyncDelay time.Duration
	// FailRate is the fraction of OSB requests (all but the catalog) that
	// fail transiently, a third each: 503 before doing anything; 500 after
	// doing the work; the connection dropped after doing the work.
	FailRate float64
	// FailedOpRate is the fraction of asynchronous provisions that end
	// "failed" although the instance was created (it stays, counted).
	FailedOpRate float64
	// DuplicateStatus is the answer to a create of an id that exists
	// (instance) — 409 or 500, "name taken"; 0 picks one of the two at
	// random for each; 200 answers as the spec asks (200, or 202 while
	// it is being created, to an identical request; 409 to another). A
	// duplicate bind always answers 500.
	DuplicateStatus int
	// NotRetrievable leaves instances_retrievable and bindings_retrievable
	// out of the catalog (GET still answers).
	NotRetrievable bool
	// ForgetfulLastOperation answers every last_operation of an instance
	// that names no operation with 200 {"state":"failed","description":
	// "The operation could not be found."}, whether the instance exists
	// or not: what a third-party broker answered for an instance it had
	// created synchronously.
	ForgetfulLastOperation bool
	// LoseFirstAnswer carries out the first create (PUT) of each instance
	// and binding id and drops the connection instead of answering.
	LoseFirstAnswer bool
}

// NotFoundDescription is the description of the forgetful last_operation
// (Config.ForgetfulLastOperation).
const NotFoundDescription = "The operation could not be found."

// State is what the inspection endpoint reports: per id, how often the
// broker created and deleted it. Ids are never forgotten.
type State struct {
	Instances map[string]*InstanceStats `json:"instances"`
	Bindings  map[string]*BindingStats  `json:"bindings"`
	// Failures counts the transient failures injected, by kind.
	Failures map[string]int `json:"failures"`
}

// InstanceStats is one instance id's history.
type InstanceStats struct {
	Creates int `json:"creates"`
	Deletes int `json:"deletes"`
	// Identical counts creates answered as identical (DuplicateStatus
	// 200).
	Identical int  `json:"identical,omitempty"`
	Exists    bool `json:"exists"`
	// State is provisioning, ready, failed (the operation failed, the
	// instance exists) or deprovisioning.
	State    string `json:"state,omitempty"`
	PlanID   string `json:"plan_id,omitempty"`
	Identity string `json:"identity,omitempty"`
	// Parameters and Context are the last create's or update's.
	Parameters json.RawMessage `json:"parameters,omitempty"`
	Context    json.RawMessage `json:"context,omitempty"`
	// LastBody is the body of the last create or update, as sent.
	LastBody json.RawMessage `json:"last_body,omitempty"`
}

// BindingStats is one binding id's history.
type BindingStats struct {
	Creates int `json:"creates"`
	Deletes int `json:"deletes"`
	// Identical counts creates answered as identical (DuplicateStatus
	// 200).
	Identical int  `json:"identical,omitempty"`
	Exists    bool `json:"exists"`
	// CredentialsIssued counts the distinct credentials handed out.
	CredentialsIssued int    `json:"credentials_issued"`
	InstanceID        string `json:"instance_id"`
	// Identity is the last bind's or unbind's originating identity.
	Identity string `json:"identity,omitempty"`
}

// Server is the ill-behaved broker. All requests are served one at a time,
// so that a seed and an order of requests give one outcome.
type Server struct {
	cfg Config
	mu  sync.Mutex
	rng *rand.Rand
	st  State
	ops map[string]*operation // by instance id
	// creds holds each live binding's credentials.
	creds map[string]json.RawMessage
	// answered holds the paths whose first create's answer was lost
	// (Config.LoseFirstAnswer).
	answered map[string]bool
	seq      int
	now      func() time.Time
}

type operation struct {
	id      string
	kind    string // provision, update, deprovision
	done    time.Time
	fails   bool
	ended   bool
	outcome string // succeeded or failed, once ended
}

// New returns a broker configured by cfg.
func New(cfg Config) *Server {
	return &Server{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x1bad)), now: time.Now,
		st:  State{Instances: map[string]*InstanceStats{}, Bindings: map[string]*BindingStats{}, Failures: map[string]int{}},
		ops: map[string]*operation{}, creds: map[string]json.RawMessage{}, answered: map[string]bool{}}
}

// Snapshot returns a copy of the state.
func (s *Server) Snapshot() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	data, _ := json.Marshal(s.st)
	var st State
	_ = json.Unmarshal(data, &st)
	return st
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == StatePath {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Snapshot())
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance()
	if u, p, ok := r.BasicAuth(); !ok || u != s.cfg.Username || p != s.cfg.Password {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"description": "bad credentials"})
		return
	}
	if r.Header.Get("X-Broker-API-Version") == "" {
		writeJSON(w, http.StatusPreconditionFailed, map[string]any{"description": "X-Broker-API-Version missing"})
		return
	}
	if r.URL.Path == "/v2/catalog" {
		s.catalog(w)
		return
	}
	kind := ""
	if s.cfg.FailRate > 0 && s.rng.Float64() < s.cfg.FailRate {
		kind = [...]string{"503-before", "500-after", "drop-after"}[s.rng.IntN(3)]
		s.st.Failures[kind]++
	}
	if kind == "" && s.cfg.LoseFirstAnswer && r.Method == http.MethodPut && !s.answered[r.URL.Path] {
		s.answered[r.URL.Path] = true
		kind = "first-answer-lost"
		s.st.Failures[kind]++
	}
	if kind == "503-before" {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"description": "backend temporarily unavailable"})
		return
	}
	if kind == "" {
		s.route(w, r, body)
		return
	}
	// The work is done, the answer is lost.
	s.route(&discard{h: http.Header{}}, r, body)
	if kind == "500-after" {
		writeJSON(w, http.StatusInternalServerError, map[string]any{"description": "internal error"})
		return
	}
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler) // no hijacking (HTTP/2): abort the stream
}

func (s *Server) catalog(w http.ResponseWriter) {
	writeJSON(w, http.StatusOK, map[string]any{"services": []any{map[string]any{
		"id": ServiceID, "name": "ill-db", "description": "A database broker that is not duplicate-safe",
		"bindable": true, "instances_retrievable": !s.cfg.NotRetrievable, "bindings_retrievable": !s.cfg.NotRetrievable, "plan_updateable": true,
		"plans": []any{
			map[string]any{"id": PlanSync, "name": "sync", "description": "Provisioned while you wait",
				"maintenance_info": map[string]any{"version": MaintenanceVersion}},
			map[string]any{"id": PlanAsync, "name": "async", "description": "Provisioned in the background"},
		},
	}}})
}

// route serves one OSB request under s.mu.
func (s *Server) route(w http.ResponseWriter, r *http.Request, body []byte) {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v2/service_instances/{i}", func(w http.ResponseWriter, r *http.Request) { s.provision(w, r, body) })
	mux.HandleFunc("PATCH /v2/service_instances/{i}", func(w http.ResponseWriter, r *http.Request) { s.update(w, r, body) })
	mux.HandleFunc("DELETE /v2/service_instances/{i}", s.deprovision)
	mux.HandleFunc("GET /v2/service_instances/{i}", s.getInstance)
	mux.HandleFunc("GET /v2/service_instances/{i}/last_operation", s.lastOperation)
	mux.HandleFunc("PUT /v2/service_instances/{i}/service_bindings/{b}", func(w http.ResponseWriter, r *http.Request) { s.bind(w, r, body) })
	mux.HandleFunc("DELETE /v2/service_instances/{i}/service_bindings/{b}", s.unbind)
	mux.HandleFunc("GET /v2/service_instances/{i}/service_bindings/{b}", s.getBinding)
	mux.HandleFunc("GET /v2/service_instances/{i}/service_bindings/{b}/last_operation", s.bindingLastOperation)
	mux.ServeHTTP(w, r)
}

// advance ends every operation whose time has come.
func (s *Server) advance() {
	now := s.now()
	for id, op := range s.ops {
		if op.ended || now.Before(op.done) {
			continue
		}
		op.ended = true
		in := s.st.Instances[id]
		switch {
		case op.kind == "deprovision":
			in.Exists, in.State = false, ""
			in.Deletes++
			op.outcome = "succeeded"
		case op.fails:
			in.State, op.outcome = "failed", "failed"
		default:
			in.State, op.outcome = "ready", "succeeded"
		}
	}
}

// identical answers a create of instance id, which exists, as the spec
// asks: 200 (202 while it is being created) when req is the create that
// made it, 409 otherwise.
func (s *Server) identical(w http.ResponseWriter, id string, in *InstanceStats, req osbapi.ProvisionRequest) {
	if req.PlanID != in.PlanID || !bytes.Equal(req.Parameters, in.Parameters) {
		writeJSON(w, http.StatusConflict, map[string]any{"description": "an instance with this id exists with other attributes"})
		return
	}
	in.Identical++
	if in.State == "provisioning" {
		if op := s.ops[id]; op != nil {
			writeJSON(w, http.StatusAccepted, map[string]any{"operation": op.id, "dashboard_url": dashboardURL(id)})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"dashboard_url": dashboardURL(id)})
}

func (s *Server) provision(w http.ResponseWriter, r *http.Request, body []byte) {
	id := r.PathValue("i")
	var req osbapi.ProvisionRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"description": "malformed body"})
		return
	}
	if req.ServiceID != ServiceID || (req.PlanID != PlanSync && req.PlanID != PlanAsync) {
		writeJSON(w, http.StatusBadRequest, map[string]any{"description": "unknown service or plan"})
		return
	}
	async := req.PlanID == PlanAsync
	if async && r.URL.Query().Get("accepts_incomplete") != "true" {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"error": "AsyncRequired",
			"description": "This service plan requires client support for asynchronous service operations."})
		return
	}
	in := s.st.Instances[id]
	if in != nil && in.Exists {
		// The marketplace-fronting broker: the backing instance's name is
		// taken, identical request or not.
		status := s.cfg.DuplicateStatus
		if status == http.StatusOK {
			s.identical(w, id, in, req)
			return
		}
		if status == 0 {
			status = [...]int{http.StatusConflict, http.StatusInternalServerError}[s.rng.IntN(2)]
		}
		writeJSON(w, status, map[string]any{"description": fmt.Sprintf("create service instance: the name %q is taken", "si-"+id)})
		return
	}
	if in == nil {
		in = &InstanceStats{}
		s.st.Instances[id] = in
	}
	in.Creates++
	in.Exists = true
	in.PlanID, in.Parameters, in.Context = req.PlanID, req.Parameters, req.Context
	in.LastBody = json.RawMessage(body)
	in.Identity = r.Header.Get("X-Broker-API-Originating-Identity")
	dashboard := dashboardURL(id)
	if !async {
		in.State = "ready"
		delete(s.ops, id)
		writeJSON(w, http.StatusCreated, map[string]any{"dashboard_url": dashboard})
		return
	}
	in.State = "provisioning"
	op := s.start(id, "provision")
	op.fails = s.cfg.FailedOpRate > 0 && s.rng.Float64() < s.cfg.FailedOpRate
	writeJSON(w, http.StatusAccepted, map[string]any{"operation": op.id, "dashboard_url": dashboard})
}

func (s *Server) start(id, kind string) *operation {
	s.seq++
	op := &operation{id: fmt.Sprintf("%s-%d", kind, s.seq), kind: kind, done: s.now().Add(s.cfg.AsyncDelay)}
	s.ops[id] = op
	return op
}

func (s *Server) busy(id string) bool {
	op := s.ops[id]
	return op != nil && !op.ended
}

func (s *Server) update(w http.ResponseWriter, r *http.Request, body []byte) {
	id := r.PathValue("i")
	in := s.st.Instances[id]
	if in == nil || !in.Exists {
		writeJSON(w, http.StatusNotFound, map[string]any{"description": "no such instance"})
		return
	}
	if s.busy(id) {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"error": "ConcurrencyError",
			"description": "The Service Broker does not support concurrent requests that mutate the same resource."})
		return
	}
	var req osbapi.UpdateRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"description": "malformed body"})
		return
	}
	if req.PlanID != "" {
		in.PlanID = req.PlanID
	}
	if req.Parameters != nil {
		in.Parameters = req.Parameters
	}
	if req.Context != nil {
		in.Context = req.Context
	}
	in.LastBody = json.RawMessage(body)
	in.Identity = r.Header.Get("X-Broker-API-Originating-Identity")
	writeJSON(w, http.StatusOK, map[string]any{})
}

func (s *Server) deprovision(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("i")
	in := s.st.Instances[id]
	if in == nil || !in.Exists {
		writeJSON(w, http.StatusGone, map[string]any{})
		return
	}
	if s.busy(id) {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"error": "ConcurrencyError",
			"description": "The Service Broker does not support concurrent requests that mutate the same resource."})
		return
	}
	for _, b := range s.st.Bindings {
		if b.Exists && b.InstanceID == id {
			writeJSON(w, http.StatusBadRequest, map[string]any{"description": "cannot delete service instance: it has service keys"})
			return
		}
	}
	in.Identity = r.Header.Get("X-Broker-API-Originating-Identity")
	if in.PlanID == PlanAsync && r.URL.Query().Get("accepts_incomplete") == "true" {
		in.State = "deprovisioning"
		op := s.start(id, "deprovision")
		writeJSON(w, http.StatusAccepted, map[string]any{"operation": op.id})
		return
	}
	in.Exists, in.State = false, ""
	in.Deletes++
	delete(s.ops, id)
	writeJSON(w, http.StatusOK, map[string]any{})
}

func (s *Server) getInstance(w http.ResponseWriter, r *http.Request) {
	in := s.st.Instances[r.PathValue("i")]
	if in == nil || !in.Exists || in.State == "provisioning" {
		writeJSON(w, http.StatusNotFound, map[string]any{"description": "no such instance"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"service_id": ServiceID, "plan_id": in.PlanID, "parameters": in.Parameters,
		"dashboard_url": dashboardURL(r.PathValue("i"))})
}

// dashboardURL is the dashboard_url of instance id.
func dashboardURL(id string) string { return "https://dashboard.example/si-" + id }

func (s *Server) lastOperation(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("i")
	in, op := s.st.Instances[id], s.ops[id]
	q := r.URL.Query().Get("operation")
	switch {
	case q == "" && s.cfg.ForgetfulLastOperation:
		writeJSON(w, http.StatusOK, map[string]any{"state": "failed", "description": NotFoundDescription})
	case in == nil || !in.Exists:
		writeJSON(w, http.StatusGone, map[string]any{})
	case op == nil:
		writeJSON(w, http.StatusOK, map[string]any{"state": "succeeded"})
	case q != "" && q != op.id:
		writeJSON(w, http.StatusBadRequest, map[string]any{"description": "unknown operation"})
	case !op.ended:
		writeJSON(w, http.StatusOK, map[string]any{"state": "in progress"})
	case op.outcome == "failed":
		writeJSON(w, http.StatusOK, map[string]any{"state": "failed", "description": "provisioning the backing instance failed"})
	default:
		writeJSON(w, http.StatusOK, map[string]any{"state": "succeeded"})
	}
}

func (s *Server) bind(w http.ResponseWriter, r *http.Request, body []byte) {
	iid, bid := r.PathValue("i"), r.PathValue("b")
	var req osbapi.BindRequest
	if err := json.Unmarshal(body, &req); err != nil || req.ServiceID != ServiceID {
		writeJSON(w, http.StatusBadRequest, map[string]any{"description": "malformed body or unknown service"})
		return
	}
	in := s.st.Instances[iid]
	if in == nil || !in.Exists {
		writeJSON(w, http.StatusBadRequest, map[string]any{"description": "no such instance"})
		return
	}
	if in.State != "ready" {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"error": "ConcurrencyError",
			"description": "The Service Broker does not support concurrent requests that mutate the same resource."})
		return
	}
	b := s.st.Bindings[bid]
	if b != nil && b.Exists {
		writeJSON(w, http.StatusInternalServerError, map[string]any{"description": fmt.Sprintf("create service key %q: the name is taken", "key-"+bid)})
		return
	}
	if b == nil {
		b = &BindingStats{}
		s.st.Bindings[bid] = b
	}
	b.Creates++
	b.CredentialsIssued++
	b.Exists, b.InstanceID = true, iid
	b.Identity = r.Header.Get("X-Broker-API-Originating-Identity")
	secret := make([]byte, 16)
	for i := range secret {
		secret[i] = byte(s.rng.UintN(256))
	}
	creds, _ := json.Marshal(map[string]any{"username": "key-" + bid, "password": hex.EncodeToString(secret), "host": "db.example"})
	s.creds[bid] = creds
	writeJSON(w, http.StatusCreated, map[string]any{"credentials": json.RawMessage(creds)})
}

func (s *Server) unbind(w http.ResponseWriter, r *http.Request) {
	bid := r.PathValue("b")
	b := s.st.Bindings[bid]
	if b == nil || !b.Exists || b.InstanceID != r.PathValue("i") {
		writeJSON(w, http.StatusGone, map[string]any{})
		return
	}
	b.Exists = false
	b.Deletes++
	b.Identity = r.Header.Get("X-Broker-API-Originating-Identity")
	delete(s.creds, bid)
	writeJSON(w, http.StatusOK, map[string]any{})
}

func (s *Server) getBinding(w http.ResponseWriter, r *http.Request) {
	bid := r.PathValue("b")
	b := s.st.Bindings[bid]
	if b == nil || !b.Exists || b.InstanceID != r.PathValue("i") {
		writeJSON(w, http.StatusNotFound, map[string]any{"description": "no such binding"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"credentials": s.creds[bid]})
}

func (s *Server) bindingLastOperation(w http.ResponseWriter, r *http.Request) {
	b := s.st.Bindings[r.PathValue("b")]
	if b == nil || !b.Exists {
		writeJSON(w, http.StatusGone, map[string]any{})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"state": "succeeded"})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// discard is the ResponseWriter of work whose answer is lost.
type discard struct {
	h http.Header
	b bytes.Buffer
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return d.b.Write(p) }
func (d *discard) WriteHeader(int)             {}
