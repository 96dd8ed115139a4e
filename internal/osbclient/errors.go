package osbclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/bucketbroker/bucketbroker/internal/osbapi"
)

// The error codes of the OSB spec (v2.17, "Service Broker Errors").
const (
	CodeAsyncRequired           = "AsyncRequired"
	CodeConcurrencyError        = "ConcurrencyError"
	CodeRequiresApp             = "RequiresApp"
	CodeMaintenanceInfoConflict = "MaintenanceInfoConflict"
)

// maxDescription bounds the description an Error keeps: the platform shows
// it to a user, and a broker that answers a page of HTML must not fill a
// record or a log with it.
const maxDescription = 1024

// Error is an upstream answer with a status the call does not treat as
// success.
type Error struct {
	Method, Path string
	// Status is the HTTP status code.
	Status int
	// Code is the spec's "error" field (empty when absent).
	Code string
	// Description is the "description" field, or, for a body that is not
	// an OSB error object, the start of the body as text. Bounded.
	Description string
	// InstanceUsable and UpdateRepeatable are the spec's optional fields of
	// an error on update and deprovision; nil when absent.
	InstanceUsable   *bool
	UpdateRepeatable *bool
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: upstream answered %d", e.Method, e.Path, e.Status)
	if e.Code != "" {
		fmt.Fprintf(&b, " %s", e.Code)
	}
	if e.Description != "" {
		fmt.Fprintf(&b, ": %s", e.Description)
	}
	return b.String()
}

func newError(method, path string, status int, body []byte) *Error {
	e := &Error{Method: method, Path: path, Status: status}
	var wire struct {
		osbapi.Error
		// Detail, bucketbroker's own field, is not read from an
		// upstream: a value of any kind leaves the body an error object.
		Detail json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &wire) == nil {
		e.Code, e.Description = bound(wire.Error.Error), bound(wire.Description)
		e.InstanceUsable, e.UpdateRepeatable = wire.InstanceUsable, wire.UpdateRepeatable
		return e
	}
	e.Description = bound(strings.TrimSpace(string(body)))
	return e
}

// bound cuts s to maxDescription bytes on a rune boundary and makes it
// valid UTF-8.
func bound(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxDescription {
		return s
	}
	cut := maxDescription
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// IsStatus reports whether err is an upstream answer with that status.
func IsStatus(err error, status int) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == status
}

// IsCode reports whether err is an upstream answer carrying that spec error
// code (CodeAsyncRequired, CodeConcurrencyError, ...).
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// Answered reports whether err is an upstream answer (an *Error) rather
// than no answer at all; after no answer, a create may have happened.
func Answered(err error) bool {
	var e *Error
	return errors.As(err, &e)
}
