package osbapi

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
)

// Call holds what a request that changes something may carry besides its
// body: the accepts_incomplete query parameter and the
// X-Broker-API-Originating-Identity header ("platform base64(json)").
type Call struct {
	AcceptsIncomplete bool   `json:"-"`
	Identity          string `json:"-"`
}

// MaintenanceInfo is the maintenance_info object of a provision or update.
type MaintenanceInfo struct {
	Version     string `json:"version"`
	Description string `json:"description,omitempty"`
}

// ProvisionRequest is the body of PUT /v2/service_instances/:instance_id.
type ProvisionRequest struct {
	Call
	ServiceID        string           `json:"service_id"`
	PlanID           string           `json:"plan_id"`
	OrganizationGUID string           `json:"organization_guid,omitempty"`
	SpaceGUID        string           `json:"space_guid,omitempty"`
	Context          json.RawMessage  `json:"context,omitempty"`
	Parameters       json.RawMessage  `json:"parameters,omitempty"`
	MaintenanceInfo  *MaintenanceInfo `json:"maintenance_info,omitempty"`
}

// UpdateRequest is the body of PATCH /v2/service_instances/:instance_id.
// PlanID is empty when the plan does not change.
type UpdateRequest struct {
	Call
	ServiceID       string           `json:"service_id"`
	PlanID          string           `json:"plan_id,omitempty"`
	Context         json.RawMessage  `json:"context,omitempty"`
	Parameters      json.RawMessage  `json:"parameters,omitempty"`
	PreviousValues  json.RawMessage  `json:"previous_values,omitempty"`
	MaintenanceInfo *MaintenanceInfo `json:"maintenance_info,omitempty"`
}

// BindRequest is the body of PUT
// /v2/service_instances/:instance_id/service_bindings/:binding_id.
type BindRequest struct {
	Call
	ServiceID    string          `json:"service_id"`
	PlanID       string          `json:"plan_id"`
	AppGUID      string          `json:"app_guid,omitempty"`
	BindResource json.RawMessage `json:"bind_resource,omitempty"`
	Context      json.RawMessage `json:"context,omitempty"`
	Parameters   json.RawMessage `json:"parameters,omitempty"`
	// PredecessorBindingID rotates that binding (v2.17; only for a
	// binding_rotatable plan).
	PredecessorBindingID string `json:"predecessor_binding_id,omitempty"`
}

// InstanceResponse is the answer to a provision or an update that is done
// or exists already (200, 201) or, with an operation, accepted (202).
type InstanceResponse struct {
	Status       int             `json:"-"`
	DashboardURL string          `json:"dashboard_url,omitempty"`
	Operation    string          `json:"operation,omitempty"`
	Metadata     json.RawMessage `json:"metadata,omitempty"`
}

// Async reports whether the broker accepted the request to finish later.
func (r *InstanceResponse) Async() bool { return r.Status == http.StatusAccepted }

// OperationResponse is the answer to a deprovision or unbind (200 done,
// 202 accepted), and the door's 202 to any changing call: the operation to
// poll.
type OperationResponse struct {
	Status    int    `json:"-"`
	Operation string `json:"operation,omitempty"`
}

// Async reports whether the broker accepted the request to finish later.
func (r *OperationResponse) Async() bool { return r.Status == http.StatusAccepted }

// The states of a last_operation answer.
const (
	StateInProgress = "in progress"
	StateSucceeded  = "succeeded"
	StateFailed     = "failed"
)

// LastOperation is the answer to a last_operation poll.
type LastOperation struct {
	State            string `json:"state"`
	Description      string `json:"description,omitempty"`
	InstanceUsable   *bool  `json:"instance_usable,omitempty"`
	UpdateRepeatable *bool  `json:"update_repeatable,omitempty"`
}

// Instance is the answer to GET /v2/service_instances/:instance_id.
type Instance struct {
	ServiceID       string          `json:"service_id"`
	PlanID          string          `json:"plan_id"`
	DashboardURL    string          `json:"dashboard_url,omitempty"`
	Parameters      json.RawMessage `json:"parameters,omitempty"`
	MaintenanceInfo json.RawMessage `json:"maintenance_info,omitempty"`
	Metadata        json.RawMessage `json:"metadata,omitempty"`
}

// Binding is the answer to a bind (200, 201; 202 with an operation) or to
// a GET of a binding. Its String and LogValue forms show only the size of
// the credentials, so a Binding printed or logged by mistake leaks nothing.
type Binding struct {
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

// Async reports whether the broker accepted the bind to finish later.
func (b *Binding) Async() bool { return b.Status == http.StatusAccepted }

// String describes the binding without its credentials (fmt's %v and %+v
// use it too).
func (b Binding) String() string {
	return fmt.Sprintf("binding{status %d, operation %q, credentials %d bytes (redacted)}", b.Status, b.Operation, len(b.Credentials))
}

// LogValue is String for log/slog.
func (b Binding) LogValue() slog.Value { return slog.StringValue(b.String()) }

// Error is the body of an error answer. Error, the spec's error code, is
// omitted when no code applies (if present it must not be empty).
// InstanceUsable and UpdateRepeatable are the spec's optional fields of a
// failed update or deprovision. Detail is bucketbroker's own account where
// Description is the spec's fixed text for the code: a field the spec does
// not name, which receivers ignore.
type Error struct {
	Error            string `json:"error,omitempty"`
	Description      string `json:"description"`
	Detail           string `json:"detail,omitempty"`
	InstanceUsable   *bool  `json:"instance_usable,omitempty"`
	UpdateRepeatable *bool  `json:"update_repeatable,omitempty"`
}
