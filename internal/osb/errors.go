package osb

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/osbapi"
)

// OSB error codes (spec section "Service Broker Errors").
const (
	codeAsyncRequired    = "AsyncRequired"
	codeConcurrencyError = "ConcurrencyError"
	codeMaintenanceInfo  = "MaintenanceInfoConflict"
)

// The descriptions the spec's Error Codes table gives for its codes. Clients
// compare them word for word (go-open-service-broker-client's
// IsAsyncRequiredError and IsConcurrencyError, used by the Kubernetes Service
// Catalog), so these answers carry them exactly; bucketbroker's own text
// goes into the detail field.
const (
	descAsyncRequired    = "This service plan requires client support for asynchronous service operations."
	descConcurrencyError = "The Service Broker does not support concurrent requests that mutate the same resource."
	descMaintenanceInfo  = "The maintenance_info.version field provided in the request does not match the maintenance_info.version field provided in the Service Broker's Catalog."
)

// internalDescription is all a platform learns about an unexpected failure;
// the cause goes to the log.
const internalDescription = "internal error; the broker logged the cause"

// errorBody is the OSB error answer.
type errorBody = osbapi.Error

// requestError is a failure the door itself decides: a bad request, failed
// authentication, an unsupported version, a body that is too large.
type requestError struct {
	status      int
	code        string
	description string
}

func (e *requestError) Error() string { return e.description }

func badRequest(format string, args ...any) error {
	return &requestError{status: http.StatusBadRequest, description: fmt.Sprintf(format, args...)}
}

// errorResponse maps an error onto the OSB answer. The engine's sentinel
// errors carry messages meant for the platform's user, so their text is
// passed on; anything unknown gets a generic description, so that internals
// (addresses, backend error text) never reach the platform.
func errorResponse(err error) (int, errorBody) {
	var re *requestError
	if errors.As(err, &re) {
		return re.status, errorBody{Error: re.code, Description: re.description}
	}
	user := func(status int, code string, sentinel error) (int, errorBody) {
		d := err.Error()
		if d == "" {
			d = sentinel.Error()
		}
		return status, errorBody{Error: code, Description: d}
	}
	// fixed answers an error whose code the spec pairs with a fixed
	// description; the engine's message becomes the detail.
	fixed := func(code, description string, sentinel error) (int, errorBody) {
		d := err.Error()
		if d == "" {
			d = sentinel.Error()
		}
		return http.StatusUnprocessableEntity, errorBody{Error: code, Description: description, Detail: d}
	}
	switch {
	case errors.Is(err, engine.ErrInvalid):
		return user(http.StatusBadRequest, "", engine.ErrInvalid)
	case errors.Is(err, engine.ErrConflict):
		return user(http.StatusConflict, "", engine.ErrConflict)
	case errors.Is(err, engine.ErrGone):
		return user(http.StatusGone, "", engine.ErrGone)
	case errors.Is(err, engine.ErrMissing):
		return user(http.StatusNotFound, "", engine.ErrMissing)
	case errors.Is(err, engine.ErrConcurrency):
		return fixed(codeConcurrencyError, descConcurrencyError, engine.ErrConcurrency)
	case errors.Is(err, engine.ErrMaintenanceInfoConflict):
		return fixed(codeMaintenanceInfo, descMaintenanceInfo, engine.ErrMaintenanceInfoConflict)
	case errors.Is(err, engine.ErrAsyncRequired):
		return fixed(codeAsyncRequired, descAsyncRequired, engine.ErrAsyncRequired)
	case errors.Is(err, engine.ErrUnprocessable):
		return user(http.StatusUnprocessableEntity, "", engine.ErrUnprocessable)
	case errors.Is(err, engine.ErrUnavailable) && errors.Is(err, engine.ErrFull):
		// A full disk is named: the people behind the platform pass it on to
		// whoever frees the space, and no address or path is in the words.
		return http.StatusServiceUnavailable, errorBody{Description: engine.ErrUnavailable.Error() + ": the broker's store cannot write (" + engine.ErrFull.Error() + "); retry later"}
	case errors.Is(err, engine.ErrUnavailable):
		// The wrapped cause is about our infrastructure (a store that cannot
		// be reached), which is not the platform's business.
		return http.StatusServiceUnavailable, errorBody{Description: engine.ErrUnavailable.Error() + "; retry later"}
	case errors.Is(err, engine.ErrFailed):
		return user(http.StatusInternalServerError, "", engine.ErrFailed)
	}
	return http.StatusInternalServerError, errorBody{Description: internalDescription}
}

// fail answers err and hands it to the request's log line.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	noteError(w, err)
	status, body := errorResponse(err)
	writeJSON(w, status, body)
}

// respond answers v as JSON. Encoding happens before anything is written, so
// that a value that cannot be encoded still gets a proper 500.
func (h *Handler) respond(w http.ResponseWriter, r *http.Request, status int, v any) {
	if _, ok := v.(emptyBody); ok {
		// Most answers (every replay among them): spare the encoder.
		writeRaw(w, status, emptyJSON)
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		h.fail(w, r, fmt.Errorf("encode %d response: %w", status, err))
		return
	}
	writeRaw(w, status, b)
}

// writeJSON answers v, which must be one of the package's own types that
// always encode.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"description":"`+internalDescription+`"}`)
	}
	writeRaw(w, status, b)
}

// emptyBody is the answer {}, which respond writes without the encoder.
type emptyBody struct{}

// emptyJSON is emptyBody encoded. Only ever written, never changed.
var emptyJSON = []byte("{}")

func writeRaw(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
