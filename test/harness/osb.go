package harness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// The built-in catalog's service, its plain plan and its plan whose
// buckets keep every version of their objects.
const (
	ServiceID     = "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b01"
	PlanStd       = "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b11"
	PlanVersioned = "6e4a7a9c-0f1d-4a8e-9b3c-2d5f7e9a1b14"
)

// Request bodies and the DELETE query a platform sends for the plain plan.
var (
	ProvisionBody = map[string]any{"service_id": ServiceID, "plan_id": PlanStd, "organization_guid": "org", "space_guid": "space"}
	BindBody      = map[string]any{"service_id": ServiceID, "plan_id": PlanStd, "app_guid": "app"}
	DeleteQuery   = fmt.Sprintf("?service_id=%s&plan_id=%s", ServiceID, PlanStd)
)

// Reply is one OSB answer. Err is set when no answer came (the process is
// down or died while answering).
type Reply struct {
	Code int
	Body map[string]any
	Err  error
	Took time.Duration
}

// Creds returns a bind answer's credentials, or nil.
func (r Reply) Creds() map[string]any { m, _ := r.Body["credentials"].(map[string]any); return m }

// Operation returns the operation of a 202 answer.
func (r Reply) Operation() string { s, _ := r.Body["operation"].(string); return s }

// State returns a last_operation answer's state.
func (r Reply) State() string { s, _ := r.Body["state"].(string); return s }

// Description returns the description of a last_operation or error answer.
func (r Reply) Description() string { s, _ := r.Body["description"].(string); return s }

func (r Reply) String() string {
	if r.Err != nil {
		return "no answer: " + r.Err.Error()
	}
	return fmt.Sprintf("%d %v", r.Code, r.Body)
}

var client = &http.Client{Timeout: 90 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// Do sends one OSB request as a platform would.
func (b *Broker) Do(method, path string, body any) Reply {
	var rd io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, b.URL()+path, rd)
	if err != nil {
		return Reply{Err: err}
	}
	pass := Pass
	if b.Password != "" {
		pass = b.Password
	}
	req.SetBasicAuth(User, pass)
	req.Header.Set("X-Broker-API-Version", "2.17")
	start := time.Now()
	resp, err := b.Client().Do(req)
	if err != nil {
		return Reply{Err: err, Took: time.Since(start)}
	}
	defer resp.Body.Close()
	r := Reply{Code: resp.StatusCode, Body: map[string]any{}}
	data, _ := io.ReadAll(resp.Body)
	r.Took = time.Since(start)
	_ = json.Unmarshal(data, &r.Body)
	return r
}

// Until re-sends a request, as a platform does, until it gets one of the
// wanted codes or d passes; it returns the last answer.
func (b *Broker) Until(d time.Duration, method, path string, body any, want ...int) (Reply, error) {
	deadline := time.Now().Add(d)
	var r Reply
	for {
		r = b.Do(method, path, body)
		for _, w := range want {
			if r.Err == nil && r.Code == w {
				return r, nil
			}
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("%s %s: last answer %s after %s, want one of %v", method, path, r, d, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// LastOperation polls path's last_operation for operation op until it is
// no longer in progress, or d passes. It returns the last answer; a 410
// (the resource is gone: an async delete's success) ends the poll too.
func (b *Broker) LastOperation(d time.Duration, path, op string) (Reply, error) {
	deadline := time.Now().Add(d)
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	var r Reply
	for {
		r = b.Do("GET", path+"/last_operation"+sep+"operation="+op, nil)
		if r.Err == nil && (r.Code == http.StatusGone || (r.Code == http.StatusOK && r.State() != "in progress")) {
			return r, nil
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("operation %s of %s: last answer %s after %s", op, path, r, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
