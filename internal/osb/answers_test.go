package osb

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/bucketbroker/bucketbroker/internal/engine"
)

// These tests check how engine answers become OSB answers.

func TestEngineErrors(t *testing.T) {
	cases := map[string]struct {
		reason   string
		err      error
		want     int
		wantBody errorBody
	}{
		"invalid": {
			reason:   "a request the engine rejects is a 400 with the engine's message",
			err:      fmt.Errorf("%w: unknown plan %q", engine.ErrInvalid, "gold"),
			want:     http.StatusBadRequest,
			wantBody: errorBody{Description: `invalid request: unknown plan "gold"`},
		},
		"conflict": {
			reason:   "same id, different request",
			err:      fmt.Errorf("instance i1 exists with another plan: %w", engine.ErrConflict),
			want:     http.StatusConflict,
			wantBody: errorBody{Description: "instance i1 exists with another plan: conflict with an existing resource"},
		},
		"gone": {
			reason:   "unknown id on delete",
			err:      engine.ErrGone,
			want:     http.StatusGone,
			wantBody: errorBody{Description: "resource does not exist"},
		},
		"missing": {
			reason:   "unknown id on get",
			err:      engine.ErrMissing,
			want:     http.StatusNotFound,
			wantBody: errorBody{Description: "resource not found"},
		},
		"concurrency": {
			reason: "OSB requires the ConcurrencyError code, and clients match the spec's description word for word",
			err:    fmt.Errorf("%w: deprovisioning", engine.ErrConcurrency),
			want:   http.StatusUnprocessableEntity,
			wantBody: errorBody{Error: "ConcurrencyError",
				Description: "The Service Broker does not support concurrent requests that mutate the same resource.",
				Detail:      "another operation is in progress: deprovisioning"},
		},
		"async required": {
			reason: "OSB requires the AsyncRequired code, and clients match the spec's description word for word",
			err:    engine.ErrAsyncRequired,
			want:   http.StatusUnprocessableEntity,
			wantBody: errorBody{Error: "AsyncRequired",
				Description: "This service plan requires client support for asynchronous service operations.",
				Detail:      "this plan requires accepts_incomplete=true"},
		},
		"maintenance info conflict": {
			reason: "OSB's MaintenanceInfoConflict code with the spec's description",
			err:    fmt.Errorf("%w: plan is at 1.0.0", engine.ErrMaintenanceInfoConflict),
			want:   http.StatusUnprocessableEntity,
			wantBody: errorBody{Error: "MaintenanceInfoConflict",
				Description: "The maintenance_info.version field provided in the request does not match the maintenance_info.version field provided in the Service Broker's Catalog.",
				Detail:      "maintenance_info.version is not the plan's: plan is at 1.0.0"},
		},
		"unprocessable": {
			reason:   "a 422 without an OSB code: the error field is omitted",
			err:      fmt.Errorf("%w: plan change not allowed", engine.ErrUnprocessable),
			want:     http.StatusUnprocessableEntity,
			wantBody: errorBody{Description: "request cannot be carried out: plan change not allowed"},
		},
		"unavailable": {
			reason:   "a 503 names no infrastructure detail",
			err:      fmt.Errorf("%w: dial tcp 10.0.0.7:5432: connection refused", engine.ErrUnavailable),
			want:     http.StatusServiceUnavailable,
			wantBody: errorBody{Description: "service temporarily unavailable; retry later"},
		},
		"unavailable full": {
			reason:   "a 503 for a full disk names the cause, not where the store is",
			err:      fmt.Errorf("%w: the broker's store cannot write: %w", engine.ErrUnavailable, fmt.Errorf("insert into /var/lib/bucketbroker/bucketbroker.db: %w", engine.ErrFull)),
			want:     http.StatusServiceUnavailable,
			wantBody: errorBody{Description: "service temporarily unavailable: the broker's store cannot write (database or disk is full); retry later"},
		},
		"failed": {
			reason:   "a synchronous failure is a 500 with the engine's message, so the platform starts orphan mitigation",
			err:      fmt.Errorf("%w: bucket quota exceeded", engine.ErrFailed),
			want:     http.StatusInternalServerError,
			wantBody: errorBody{Description: "operation failed: bucket quota exceeded"},
		},
		"unknown": {
			reason:   "an unexpected error is a 500 that leaks nothing",
			err:      errors.New("sqlite: database is locked at /var/lib/bucketbroker/state.db"),
			want:     http.StatusInternalServerError,
			wantBody: errorBody{Description: internalDescription},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := newBroker(t, failing(tc.err))
			for _, e := range endpoints {
				res := b.do(t, e.req)
				if res.status != tc.want {
					t.Errorf("%s: status = %d, want %d: %s", e.name, res.status, tc.want, tc.reason)
					continue
				}
				if diff := cmp.Diff(tc.wantBody, res.errorBody(t)); diff != "" {
					t.Errorf("%s: body (-want +got):\n%s\nreason: %s", e.name, diff, tc.reason)
				}
				if !strings.Contains(string(res.body), `"description"`) {
					t.Errorf("%s: body %s has no description", e.name, res.body)
				}
			}
		})
	}
}

func TestOutcomes(t *testing.T) {
	cases := map[string]struct {
		reason   string
		outcome  engine.Outcome
		endpoint string
		want     int
		wantBody string
	}{
		"provision created": {
			reason: "new and done", outcome: engine.OutcomeCreated, endpoint: "provision",
			want: http.StatusCreated, wantBody: `{}`,
		},
		"provision ok": {
			reason: "identical and done", outcome: engine.OutcomeOK, endpoint: "provision",
			want: http.StatusOK, wantBody: `{}`,
		},
		"provision accepted": {
			reason: "async: the operation id goes back", outcome: engine.OutcomeAccepted, endpoint: "provision",
			want: http.StatusAccepted, wantBody: `{"operation":"op-1"}`,
		},
		"update ok": {
			reason: "done", outcome: engine.OutcomeOK, endpoint: "update",
			want: http.StatusOK, wantBody: `{}`,
		},
		"update created": {
			reason: "update has no 201 in the spec; done is 200", outcome: engine.OutcomeCreated, endpoint: "update",
			want: http.StatusOK, wantBody: `{}`,
		},
		"update accepted": {
			reason: "async", outcome: engine.OutcomeAccepted, endpoint: "update",
			want: http.StatusAccepted, wantBody: `{"operation":"op-1"}`,
		},
		"deprovision ok": {
			reason: "done", outcome: engine.OutcomeOK, endpoint: "deprovision",
			want: http.StatusOK, wantBody: `{}`,
		},
		"deprovision accepted": {
			reason: "async", outcome: engine.OutcomeAccepted, endpoint: "deprovision",
			want: http.StatusAccepted, wantBody: `{"operation":"op-1"}`,
		},
		"bind created": {
			reason: "new binding: credentials", outcome: engine.OutcomeCreated, endpoint: "bind",
			want: http.StatusCreated, wantBody: `{"credentials":{"bucket":"b","endpoint":"","region":"","access_key_id":"AKID","secret_access_key":"SECRET","path_style":false,"access":"","uri":""}}`,
		},
		"bind ok": {
			reason: "identical binding: the same credentials", outcome: engine.OutcomeOK, endpoint: "bind",
			want: http.StatusOK, wantBody: `{"credentials":{"bucket":"b","endpoint":"","region":"","access_key_id":"AKID","secret_access_key":"SECRET","path_style":false,"access":"","uri":""}}`,
		},
		"bind accepted": {
			reason: "never credentials in a 202, even if the engine returned some", outcome: engine.OutcomeAccepted, endpoint: "bind",
			want: http.StatusAccepted, wantBody: `{"operation":"op-1"}`,
		},
		"unbind ok": {
			reason: "done", outcome: engine.OutcomeOK, endpoint: "unbind",
			want: http.StatusOK, wantBody: `{}`,
		},
		"unbind accepted": {
			reason: "async", outcome: engine.OutcomeAccepted, endpoint: "unbind",
			want: http.StatusAccepted, wantBody: `{"operation":"op-1"}`,
		},
		"provision unknown outcome": {
			reason: "a zero outcome is an engine bug: 500, not a guess", outcome: 0, endpoint: "provision",
			want: http.StatusInternalServerError, wantBody: `{"description":"` + internalDescription + `"}`,
		},
		"bind unknown outcome": {
			reason: "a zero outcome is an engine bug: 500, not a guess", outcome: 0, endpoint: "bind",
			want: http.StatusInternalServerError, wantBody: `{"description":"` + internalDescription + `"}`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			res := newBroker(t, succeed(tc.outcome, "op-1")).do(t, endpointRequest(t, tc.endpoint))
			if res.status != tc.want {
				t.Fatalf("status = %d (%s), want %d: %s", res.status, res.body, tc.want, tc.reason)
			}
			if diff := cmp.Diff(tc.wantBody, string(res.body)); diff != "" {
				t.Errorf("body (-want +got):\n%s\nreason: %s", diff, tc.reason)
			}
		})
	}
}

func TestBindWithoutCredentials(t *testing.T) {
	f := &fakeEngine{bind: func(engine.BindRequest) (engine.BindResult, error) {
		return engine.BindResult{Result: engine.Result{Outcome: engine.OutcomeCreated}}, nil
	}}
	res := newBroker(t, f).do(t, endpointRequest(t, "bind"))
	if res.status != http.StatusInternalServerError {
		t.Errorf("status = %d, want 500: a finished binding without credentials is an engine bug", res.status)
	}
}

func TestFetches(t *testing.T) {
	creds := &engine.Credentials{Bucket: "bkt", Endpoint: "https://s3", Region: "r", AccessKeyID: "AK", SecretAccessKey: "SK", PathStyle: true, Access: "read", URI: "s3://bkt"}
	cases := map[string]struct {
		reason   string
		fake     *fakeEngine
		endpoint string
		want     int
		wantBody string
	}{
		"instance with parameters": {
			reason: "service_id, plan_id and parameters",
			fake: &fakeEngine{getInstance: func(string) (*engine.InstanceView, error) {
				return &engine.InstanceView{ServiceID: "svc", PlanID: "plan", Parameters: json.RawMessage(`{"a":1}`), Bucket: "internal"}, nil
			}},
			endpoint: "get instance", want: http.StatusOK,
			wantBody: `{"service_id":"svc","plan_id":"plan","parameters":{"a":1}}`,
		},
		"instance without parameters": {
			reason: "empty parameters are omitted",
			fake: &fakeEngine{getInstance: func(string) (*engine.InstanceView, error) {
				return &engine.InstanceView{ServiceID: "svc", PlanID: "plan"}, nil
			}},
			endpoint: "get instance", want: http.StatusOK,
			wantBody: `{"service_id":"svc","plan_id":"plan"}`,
		},
		"instance nil without error": {
			reason: "an engine bug is a 500",
			fake: &fakeEngine{getInstance: func(string) (*engine.InstanceView, error) {
				return nil, nil
			}},
			endpoint: "get instance", want: http.StatusInternalServerError,
			wantBody: `{"description":"` + internalDescription + `"}`,
		},
		"binding": {
			reason: "credentials and parameters",
			fake: &fakeEngine{getBinding: func(string, string) (*engine.BindingView, error) {
				return &engine.BindingView{Credentials: creds, Parameters: json.RawMessage(`{"access":"read"}`)}, nil
			}},
			endpoint: "get binding", want: http.StatusOK,
			wantBody: `{"credentials":{"bucket":"bkt","endpoint":"https://s3","region":"r","access_key_id":"AK","secret_access_key":"SK","path_style":true,"access":"read","uri":"s3://bkt"},"parameters":{"access":"read"}}`,
		},
		"instance last operation in progress": {
			reason: "state and description",
			fake: &fakeEngine{instanceLastOperation: func(string, string) (engine.LastOperation, error) {
				return engine.LastOperation{State: engine.OpInProgress, Description: "creating bucket"}, nil
			}},
			endpoint: "instance last operation", want: http.StatusOK,
			wantBody: `{"state":"in progress","description":"creating bucket"}`,
		},
		"instance last operation succeeded": {
			reason: "an empty description is omitted",
			fake: &fakeEngine{instanceLastOperation: func(string, string) (engine.LastOperation, error) {
				return engine.LastOperation{State: engine.OpSucceeded}, nil
			}},
			endpoint: "instance last operation", want: http.StatusOK,
			wantBody: `{"state":"succeeded"}`,
		},
		"instance last operation gone": {
			reason: "Gone is a 410, which the platform takes as a finished deprovision",
			fake: &fakeEngine{instanceLastOperation: func(string, string) (engine.LastOperation, error) {
				return engine.LastOperation{State: engine.OpSucceeded, Gone: true}, nil
			}},
			endpoint: "instance last operation", want: http.StatusGone,
			wantBody: `{}`,
		},
		"binding last operation failed": {
			reason: "failed is a state, not an error: 200",
			fake: &fakeEngine{bindingLastOperation: func(string, string, string) (engine.LastOperation, error) {
				return engine.LastOperation{State: engine.OpFailed, Description: "user creation failed"}, nil
			}},
			endpoint: "binding last operation", want: http.StatusOK,
			wantBody: `{"state":"failed","description":"user creation failed"}`,
		},
		"binding last operation gone": {
			reason: "Gone is a 410",
			fake: &fakeEngine{bindingLastOperation: func(string, string, string) (engine.LastOperation, error) {
				return engine.LastOperation{Gone: true}, nil
			}},
			endpoint: "binding last operation", want: http.StatusGone,
			wantBody: `{}`,
		},
		"last operation unknown state": {
			reason: "a state OSB does not know is an engine bug: 500",
			fake: &fakeEngine{instanceLastOperation: func(string, string) (engine.LastOperation, error) {
				return engine.LastOperation{State: "pending"}, nil
			}},
			endpoint: "instance last operation", want: http.StatusInternalServerError,
			wantBody: `{"description":"` + internalDescription + `"}`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			res := newBroker(t, tc.fake).do(t, endpointRequest(t, tc.endpoint))
			if res.status != tc.want {
				t.Fatalf("status = %d (%s), want %d: %s", res.status, res.body, tc.want, tc.reason)
			}
			if diff := cmp.Diff(tc.wantBody, string(res.body)); diff != "" {
				t.Errorf("body (-want +got):\n%s\nreason: %s", diff, tc.reason)
			}
		})
	}
}

func endpointRequest(t *testing.T, name string) request {
	t.Helper()
	for _, e := range endpoints {
		if e.name == name {
			return e.req
		}
	}
	t.Fatalf("no endpoint %q", name)
	return request{}
}
