package osbclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"

	"github.com/bucketbroker/bucketbroker/internal/osbapi"
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

// The OSB wire types the client sends and receives are declared in
// internal/osbapi, for the door, this client and the ill broker alike.
type (
	// Call is what every call carries: AcceptsIncomplete sends
	// accepts_incomplete=true; Identity is forwarded as the platform sent it.
	Call = osbapi.Call
	// MaintenanceInfo is a plan's or request's maintenance_info.
	MaintenanceInfo = osbapi.MaintenanceInfo
	// ProvisionRequest is the body of a provision.
	ProvisionRequest = osbapi.ProvisionRequest
	// UpdateRequest is the body of an update.
	UpdateRequest = osbapi.UpdateRequest
	// BindRequest is the body of a bind.
	BindRequest = osbapi.BindRequest
	// InstanceResponse answers a provision or an update.
	InstanceResponse = osbapi.InstanceResponse
	// DeleteResponse answers a deprovision or an unbind.
	DeleteResponse = osbapi.OperationResponse
	// LastOperation answers a poll of last_operation.
	LastOperation = osbapi.LastOperation
	// Instance answers a GET of an instance.
	Instance = osbapi.Instance
	// Binding answers a bind or a GET of a binding.
	Binding = osbapi.Binding
)

// The states of a last_operation answer.
const (
	StateInProgress = osbapi.StateInProgress
	StateSucceeded  = osbapi.StateSucceeded
	StateFailed     = osbapi.StateFailed
)

// query adds c's accepts_incomplete to q.
func query(c Call, q url.Values) url.Values {
	if q == nil {
		q = url.Values{}
	}
	if c.AcceptsIncomplete {
		q.Set("accepts_incomplete", "true")
	}
	return q
}

func instancePath(id string) string { return "/v2/service_instances/" + url.PathEscape(id) }

func bindingPath(instanceID, bindingID string) string {
	return instancePath(instanceID) + "/service_bindings/" + url.PathEscape(bindingID)
}

// Provision creates instance id.
func (c *Client) Provision(ctx context.Context, id string, req ProvisionRequest) (*InstanceResponse, error) {
	return c.instanceChange(ctx, http.MethodPut, instancePath(id), req.Call, req, http.StatusOK, http.StatusCreated, http.StatusAccepted)
}

// Update changes instance id.
func (c *Client) Update(ctx context.Context, id string, req UpdateRequest) (*InstanceResponse, error) {
	return c.instanceChange(ctx, http.MethodPatch, instancePath(id), req.Call, req, http.StatusOK, http.StatusAccepted)
}

func (c *Client) instanceChange(ctx context.Context, method, path string, call Call, body any, ok ...int) (*InstanceResponse, error) {
	status, data, err := c.call(ctx, method, path, query(call, nil), body, call.Identity, ok...)
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
	return query(r.Call, url.Values{"service_id": {r.ServiceID}, "plan_id": {r.PlanID}})
}

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

// Bind creates binding bindingID of instance instanceID.
func (c *Client) Bind(ctx context.Context, instanceID, bindingID string, req BindRequest) (*Binding, error) {
	path := bindingPath(instanceID, bindingID)
	status, data, err := c.call(ctx, http.MethodPut, path, query(req.Call, nil), req, req.Identity, http.StatusOK, http.StatusCreated, http.StatusAccepted)
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
