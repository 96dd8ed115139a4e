package engine

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Errors the doors map to answers. Each is returned wrapped with a message
// fit for the platform's user; branch with errors.Is.
var (
	// ErrInvalid: the request is malformed or names an unknown service or
	// plan, or its parameters fail the plan's schema (OSB 400).
	ErrInvalid = errors.New("invalid request")
	// ErrConflict: a record with this id exists for a different request
	// (OSB 409).
	ErrConflict = errors.New("conflict with an existing resource")
	// ErrGone: the id is unknown or already deprovisioned (OSB 410 on DELETE).
	ErrGone = errors.New("resource does not exist")
	// ErrMissing: the id is unknown, or not yet provisioned (OSB 404 on GET).
	ErrMissing = errors.New("resource not found")
	// ErrConcurrency: another operation on this resource is in progress and
	// must finish first (OSB 422 ConcurrencyError).
	ErrConcurrency = errors.New("another operation is in progress")
	// ErrAsyncRequired: the plan only works asynchronously and the platform
	// did not send accepts_incomplete=true (OSB 422 AsyncRequired).
	ErrAsyncRequired = errors.New("this plan requires accepts_incomplete=true")
	// ErrMaintenanceInfoConflict: the request's maintenance_info.version is
	// not the plan's in the catalog (OSB 422 MaintenanceInfoConflict).
	ErrMaintenanceInfoConflict = errors.New("maintenance_info.version is not the plan's")
	// ErrUnprocessable: a well-formed request the plan cannot carry out, such
	// as an update the plan does not allow (OSB 422).
	ErrUnprocessable = errors.New("request cannot be carried out")
	// ErrUnavailable: the store cannot be reached; retry later (OSB 503).
	ErrUnavailable = errors.New("service temporarily unavailable")
	// ErrFailed: a synchronous operation was carried out and failed (OSB 500).
	// The platform should deprovision/unbind to clean up (orphan mitigation).
	ErrFailed = errors.New("operation failed")
)

// Outcome says which success answer a call earned.
type Outcome int

// Outcomes of a successful call.
const (
	// OutcomeCreated: new and finished synchronously (201).
	OutcomeCreated Outcome = iota + 1
	// OutcomeAccepted: started or still running asynchronously (202).
	OutcomeAccepted
	// OutcomeOK: already done, identical request, or finished (200).
	OutcomeOK
)

// Result is the answer to a state-changing call.
type Result struct {
	Outcome Outcome
	// Operation is the operation id for OutcomeAccepted.
	Operation string
	// DashboardURL is an upstream instance's dashboard_url, when its
	// upstream gave one (empty otherwise).
	DashboardURL string
}

// ProvisionRequest asks for a service instance (a bucket).
type ProvisionRequest struct {
	InstanceID        string
	ServiceID         string
	PlanID            string
	OrganizationGUID  string
	SpaceGUID         string
	Parameters        json.RawMessage
	Context           json.RawMessage
	AcceptsIncomplete bool
	// Identity is the X-Broker-API-Originating-Identity header, recorded
	// with the operation.
	Identity string
	// MaintenanceVersion is the request's maintenance_info.version (empty:
	// none sent).
	MaintenanceVersion string
}

// UpdateRequest asks for a plan or parameter change of an instance.
type UpdateRequest struct {
	InstanceID        string
	ServiceID         string
	PlanID            string // empty: keep the plan
	Parameters        json.RawMessage
	Context           json.RawMessage
	AcceptsIncomplete bool
	Identity          string
	// MaintenanceVersion is the request's maintenance_info.version (empty:
	// none sent). The plan's current version upgrades the instance to it.
	MaintenanceVersion string
}

// DeprovisionRequest asks to delete an instance.
type DeprovisionRequest struct {
	InstanceID        string
	ServiceID         string
	PlanID            string
	AcceptsIncomplete bool
	Identity          string
}

// BindRequest asks for a credential scoped to an instance's bucket.
type BindRequest struct {
	InstanceID        string
	BindingID         string
	ServiceID         string
	PlanID            string
	AppGUID           string
	BindResource      json.RawMessage
	Parameters        json.RawMessage
	Context           json.RawMessage
	AcceptsIncomplete bool
	Identity          string
	// PredecessorBindingID rotates that binding of the instance: the new
	// binding gets a credential of its own with the predecessor's access,
	// and both work until each is unbound (empty: a plain bind).
	PredecessorBindingID string
}

// UnbindRequest asks to delete a binding.
type UnbindRequest struct {
	InstanceID        string
	BindingID         string
	ServiceID         string
	PlanID            string
	AcceptsIncomplete bool
	Identity          string
}

// BindResult is the answer to Bind. Credentials are set only with
// OutcomeCreated and OutcomeOK (never with 202).
type BindResult struct {
	Result
	Credentials *Credentials
	// RawCredentials are an upstream binding's credentials (instead of
	// Credentials): the JSON object the upstream answered, verbatim.
	RawCredentials json.RawMessage
}

// Credentials are what an application needs to use its bucket. The JSON
// names are what OSB clients put into the application's environment.
type Credentials struct {
	Bucket          string `json:"bucket"`
	Endpoint        string `json:"endpoint"`
	Region          string `json:"region"`
	AccessKeyID     string `json:"access_key_id"`
	SecretAccessKey string `json:"secret_access_key"`
	PathStyle       bool   `json:"path_style"`
	Access          string `json:"access"`
	URI             string `json:"uri"`
}

// InstanceView is the answer to GET instance.
type InstanceView struct {
	ServiceID  string
	PlanID     string
	Parameters json.RawMessage
	Bucket     string
	// MaintenanceVersion is the maintenance_info.version the instance was
	// provisioned or last upgraded at (empty: before maintenance_info, or
	// a plan without it); MaintenanceDescription is the plan's description
	// of it, when it is still the plan's current version.
	MaintenanceVersion, MaintenanceDescription string
	// DashboardURL: see Result.
	DashboardURL string
}

// BindingView is the answer to GET binding.
type BindingView struct {
	Credentials *Credentials
	// RawCredentials: see BindResult.
	RawCredentials json.RawMessage
	Parameters     json.RawMessage
}

// LastOperation is the answer to a last_operation poll.
type LastOperation struct {
	State       OpState
	Description string
	// Gone is set when the resource has been deprovisioned and the operation
	// asked about is not that deprovision (OSB 410).
	Gone bool
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}
