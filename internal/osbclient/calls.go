package osbclient

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
)

// Catalog is the upstream's GET /v2/catalog answer.
type Catalog struct {
	Services []Service `json:"services"`
}

// Service is one catalog service: the fields upstream mode reads, and Raw,
// the service object exactly as the upstream sent it, for serving it on.
type Service struct {
	ID                   string          `json:"id"`
	Name                 string          `json:"name"`
	Bindable             bool            `json:"bindable"`
	InstancesRetrievable bool            `json:"instances_retrievable"`
	BindingsRetrievable  bool            `json:"bindings_retrievable"`
	PlanUpdateable       bool            `json:"plan_updateable"`
	Plans                []Plan          `json:"plans"`
	Raw                  json.RawMessage `json:"-"`
}

// Plan is one plan of a Service.
type Plan struct {
	ID              string          `json:"id"`
	Name            string          `json:"name"`
	Bindable        *bool           `json:"bindable,omitempty"`
	PlanUpdateable  *bool           `json:"plan_updateable,omitempty"`
	MaintenanceInfo json.RawMessage `json:"maintenance_info,omitempty"`
}

// UnmarshalJSON keeps the service's raw object beside its decoded fields.
func (s *Service) UnmarshalJSON(b []byte) error {
	type plain Service
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*s = Service(p)
	s.Raw = append(json.RawMessage(nil), b...)
	return nil
}

// Catalog fetches the upstream's catalog.
func (c *Client) Catalog(ctx context.Context) (*Catalog, error) {
	const path = "/v2/catalog"
	status, data, err := c.call(ctx, http.MethodGet, path, nil, nil, "", http.StatusOK)
	if err != nil {
		return nil, err
	}
	var cat Catalog
	if err := decode(http.MethodGet, path, status, data, &cat); err != nil {
		return nil, err
	}
	return &cat, nil
}

// Call holds what every changing request may carry besides its body.
type Call struct {
	// AcceptsIncomplete sends accepts_incomplete=true.
	AcceptsIncomplete bool `json:"-"`
	// Identity is the X-Broker-API-Originating-Identity header's value
	// ("platform base64(json)"), forwarded as the platform sent it.
	Identity string `json:"-"`
}

func (c Call) query(q url.Values) url.Values {
	if q == nil {
		q = url.Values{}
	}
	if c.AcceptsIncomplete {
		q.Set("accepts_incomplete", "true")
	}
	return q
}

// ProvisionRequest is the body of a provision.
type ProvisionRequest struct {
	Call
	ServiceID        string          `json:"service_id"`
	PlanID           string          `json:"plan_id"`
	OrganizationGUID string          `json:"organization_guid,omitempty"`
	SpaceGUID        string          `json:"space_guid,omitempty"`
	Context          json.RawMessage `json:"context,omitempty"`
	Parameters       json.RawMessage `json:"parameters,omitempty"`
	MaintenanceInfo  json.RawMessage `json:"maintenance_info,omitempty"`
}

// InstanceResponse is the answer to a provision or an update.
type InstanceResponse struct {
	// Status is 200 (exists already, identical), 201 (created) or 202
	// (accepted: poll Operation).
	Status       int             `json:"-"`
	DashboardURL string          `json:"dashboard_url,omitempty"`
	Operation    string          `json:"operation,omitempty"`
	Metadata     json.RawMessage `json:"metadata,omitempty"`
}

// Async reports whether the upstream accepted the request to finish later.
func (r *InstanceResponse) Async() bool { return r.Status == http.StatusAccepted }

func instancePath(id string) string { return "/v2/service_instances/" + url.PathEscape(id) }

func bindingPath(instanceID, bindingID string) string {
	return instancePath(instanceID) + "/service_bindings/" + url.PathEscape(bindingID)
}

// Provision creates instance id.
func (c *Client) Provision(ctx context.Context, id string, req ProvisionRequest) (*InstanceResponse, error) {
	return c.instanceChange(ctx, http.MethodPut, instancePath(id), req.Call, req, http.StatusOK, http.StatusCreated, http.StatusAccepted)
}

// UpdateRequest is the body of an update. PlanID is empty when the plan
// does not change.
type UpdateRequest struct {
	Call
	ServiceID       string          `json:"service_id"`
	PlanID          string          `json:"plan_id,omitempty"`
	Context         json.RawMessage `json:"context,omitempty"`
	Parameters      json.RawMessage `json:"parameters,omitempty"`
	PreviousValues  json.RawMessage `json:"previous_values,omitempty"`
	MaintenanceInfo json.RawMessage `json:"maintenance_info,omitempty"`
}

// Update changes instance id.
func (c *Client) Update(ctx context.Context, id string, req UpdateRequest) (*InstanceResponse, error) {
	return c.instanceChange(ctx, http.MethodPatch, instancePath(id), req.Call, req, http.StatusOK, http.StatusAccepted)
}

func (c *Client) instanceChange(ctx context.Context, method, path string, call Call, body any, ok ...int) (*InstanceResponse, error) {
	status, data, err := c.call(ctx, method, path, call.query(nil), body, call.Identity, ok...)
	if err != nil {
		return nil, err
	}
	r := &InstanceResponse{Status: status}
	if err := decode(method, path, status, data, r); err != nil {
		return nil, err
	}
	return r, nil
}

// DeleteRequest names the service and plan of a deprovision or unbind, as
// the spec's query parameters require.
type DeleteRequest struct {
	Call
	ServiceID, PlanID string
}

func (r DeleteRequest) values() url.Values {
	return r.query(url.Values{"service_id": {r.ServiceID}, "plan_id": {r.PlanID}})
}

// DeleteResponse is the answer to a deprovision or unbind: Status 200 (done)
// or 202 (poll Operation). 410 Gone is an *Error.
type DeleteResponse struct {
	Status    int    `json:"-"`
	Operation string `json:"operation,omitempty"`
}

// Async reports whether the upstream accepted the request to finish later.
func (r *DeleteResponse) Async() bool { return r.Status == http.StatusAccepted }

// Deprovision deletes instance id.
func (c *Client) Deprovision(ctx context.Context, id string, req DeleteRequest) (*DeleteResponse, error) {
	return c.delete(ctx, instancePath(id), req)
}

// Unbind deletes binding bindingID of instance instanceID.
func (c *Client) Unbind(ctx context.Context, instanceID, bindingID string, req DeleteRequest) (*DeleteResponse, error) {
	return c.delete(ctx, bindingPath(instanceID, bindingID), req)
}

func (c *Client) delete(ctx context.Context, path string, req DeleteRequest) (*DeleteResponse, error) {
	status, data, err := c.call(ctx, http.MethodDelete, path, req.values(), nil, req.Identity, http.StatusOK, http.StatusAccepted)
	if err != nil {
		return nil, err
	}
	r := &DeleteResponse{Status: status}
	if err := decode(http.MethodDelete, path, status, data, r); err != nil {
		return nil, err
	}
	return r, nil
}

// PollRequest is a last_operation poll. All fields are optional; Operation
// is the string the upstream's 202 carried.
type PollRequest struct {
	ServiceID, PlanID, Operation string
}

func (r PollRequest) values() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"service_id": r.ServiceID, "plan_id": r.PlanID, "operation": r.Operation} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// The states of a last_operation answer.
const (
	StateInProgress = "in progress"
	StateSucceeded  = "succeeded"
	StateFailed     = "failed"
)

// LastOperation is a last_operation answer.
type LastOperation struct {
	State            string `json:"state"`
	Description      string `json:"description,omitempty"`
	InstanceUsable   *bool  `json:"instance_usable,omitempty"`
	UpdateRepeatable *bool  `json:"update_repeatable,omitempty"`
}

// InstanceLastOperation polls an operation on instance id. 410 Gone (the
// instance is deleted, which ends a deprovision) is an *Error.
func (c *Client) InstanceLastOperation(ctx context.Context, id string, req PollRequest) (*LastOperation, error) {
	return c.poll(ctx, instancePath(id)+"/last_operation", req)
}

// BindingLastOperation polls an operation on a binding.
func (c *Client) BindingLastOperation(ctx context.Context, instanceID, bindingID string, req PollRequest) (*LastOperation, error) {
	return c.poll(ctx, bindingPath(instanceID, bindingID)+"/last_operation", req)
}

func (c *Client) poll(ctx context.Context, path string, req PollRequest) (*LastOperation, error) {
	status, data, err := c.call(ctx, http.MethodGet, path, req.values(), nil, "", http.StatusOK)
	if err != nil {
		return nil, err
	}
	var op LastOperation
	if err := decode(http.MethodGet, path, status, data, &op); err != nil {
		return nil, err
	}
	switch op.State {
	case StateInProgress, StateSucceeded, StateFailed:
		return &op, nil
	}
	return nil, &Error{Method: http.MethodGet, Path: path, Status: status, Description: "last_operation state " + strconv.Quote(bound(op.State)) + " is none of the spec's"}
}

// Instance is a GET of an instance.
type Instance struct {
	ServiceID       string          `json:"service_id,omitempty"`
	PlanID          string          `json:"plan_id,omitempty"`
	DashboardURL    string          `json:"dashboard_url,omitempty"`
	Parameters      json.RawMessage `json:"parameters,omitempty"`
	MaintenanceInfo json.RawMessage `json:"maintenance_info,omitempty"`
	Metadata        json.RawMessage `json:"metadata,omitempty"`
}

// GetInstance fetches instance id (for a service with
// instances_retrievable). 404 is an *Error.
func (c *Client) GetInstance(ctx context.Context, id string, req PollRequest) (*Instance, error) {
	path := instancePath(id)
	req.Operation = ""
	status, data, err := c.call(ctx, http.MethodGet, path, req.values(), nil, "", http.StatusOK)
	if err != nil {
		return nil, err
	}
	var in Instance
	if err := decode(http.MethodGet, path, status, data, &in); err != nil {
		return nil, err
	}
	return &in, nil
}

// BindRequest is the body of a bind.
type BindRequest struct {
	Call
	ServiceID    string          `json:"service_id"`
	PlanID       string          `json:"plan_id"`
	AppGUID      string          `json:"app_guid,omitempty"`
	BindResource json.RawMessage `json:"bind_resource,omitempty"`
	Context      json.RawMessage `json:"context,omitempty"`
	Parameters   json.RawMessage `json:"parameters,omitempty"`
	// PredecessorBindingID rotates that binding (OSB 2.17; only for a
	// binding_rotatable plan).
	PredecessorBindingID string `json:"predecessor_binding_id,omitempty"`
}

// Binding is a bind answer or a GET of a binding. Credentials stay raw:
// the caller seals them. Its String and LogValue forms show
// only their size, so a Binding printed or logged by mistake leaks nothing.
type Binding struct {
	// Status is 200 (exists already, identical), 201 (created) or 202
	// (accepted: poll Operation); zero for a GET.
	Status          int             `json:"-"`
	Credentials     json.RawMessage `json:"credentials,omitempty"`
	SyslogDrainURL  string          `json:"syslog_drain_url,omitempty"`
	RouteServiceURL string          `json:"route_service_url,omitempty"`
	VolumeMounts    json.RawMessage `json:"volume_mounts,omitempty"`
	Endpoints       json.RawMessage `json:"endpoints,omitempty"`
	Parameters      json.RawMessage `json:"parameters,omitempty"`
	Metadata        json.RawMessage `json:"metadata,omitempty"`
	Operation       string          `json:"operation,omitempty"`
}

// Async reports whether the upstream accepted the bind to finish later.
func (b *Binding) Async() bool { return b.Status == http.StatusAccepted }

// String describes the binding without its credentials (fmt's %v and %+v
// use it too).
func (b Binding) String() string {
	return fmt.Sprintf("binding{status %d, operation %q, credentials %d bytes (redacted)}", b.Status, b.Operation, len(b.Credentials))
}

// LogValue is String for log/slog.
func (b Binding) LogValue() slog.Value { return slog.StringValue(b.String()) }

// Bind creates binding bindingID of instance instanceID.
func (c *Client) Bind(ctx context.Context, instanceID, bindingID string, req BindRequest) (*Binding, error) {
	path := bindingPath(instanceID, bindingID)
	status, data, err := c.call(ctx, http.MethodPut, path, req.query(nil), req, req.Identity, http.StatusOK, http.StatusCreated, http.StatusAccepted)
	if err != nil {
		return nil, err
	}
	b := &Binding{Status: status}
	if err := decode(http.MethodPut, path, status, data, b); err != nil {
		return nil, err
	}
	return b, nil
}

// GetBinding fetches a binding (for a service with bindings_retrievable),
// its credentials included. 404 is an *Error.
func (c *Client) GetBinding(ctx context.Context, instanceID, bindingID string, req PollRequest) (*Binding, error) {
	path := bindingPath(instanceID, bindingID)
	req.Operation = ""
	status, data, err := c.call(ctx, http.MethodGet, path, req.values(), nil, "", http.StatusOK)
	if err != nil {
		return nil, err
	}
	var b Binding
	if err := decode(http.MethodGet, path, status, data, &b); err != nil {
		return nil, err
	}
	return &b, nil
}
