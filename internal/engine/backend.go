package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/catalog"
)

// Backend carries out the records of the services it serves: the engine
// records the intent, answers duplicates from the record, picks the
// backend per record (Record.Backend) and asks it what only it can tell.
// Two implementations exist: the bucket backend (internal/bucket, a bucket
// and a credential through an S3 + IAM driver) and an upstream OSB broker
// (internal/upstream); both are driven the same way.
type Backend interface {
	Operations
	Requests
	// Name names the backend in records (Record.Backend) and logs.
	Name() string
	// ServiceIDs are the ids of the services the backend serves (each
	// also in the engine's catalog).
	ServiceIDs() []string
}

// Operations carry out a record's operation. The engine hands each method
// the record's current operation; it drives that operation to its end
// (with Work.Finish or Work.Fail, returning what they return) or returns
// the error that interrupted it (the operation then stays in progress, for
// the engine to resume). Every step must be idempotent: a step repeated
// after a crash must find and adopt what the previous attempt made.
type Operations interface {
	Provision(ctx context.Context, w *Work) error
	Update(ctx context.Context, w *Work) error
	Deprovision(ctx context.Context, w *Work) error
	Bind(ctx context.Context, w *Work) error
	Unbind(ctx context.Context, w *Work) error
}

// Requests is what the engine asks a backend while it answers a request:
// its checks, the state a record starts with, and a binding's credentials.
type Requests interface {
	// Check refuses, before anything is recorded, a request the backend
	// would refuse: r is the request of plan as the record will keep it
	// (an update's merged parameters), of kind, under id. The error wraps
	// ErrInvalid (400) or ErrUnprocessable (422).
	Check(kind Kind, plan *catalog.Plan, r Request, id string) error
	// Prepare readies rec for the provision or bind the request is about
	// to record: the backend's part of a record new under its id or of a
	// deleted one reused (then that part is nil), or of a failed one
	// retried (then it is as the failed attempt left it). An error wraps
	// ErrInvalid or ErrUnprocessable, and nothing is recorded.
	Prepare(ctx context.Context, rec *Record, p Preparation) error
	// Allows reports whether plan allows binding, a live binding of one of
	// the plan's instances (a plan change, or a bind recorded meanwhile);
	// when it does not, what names what of the binding it does not allow
	// (its access).
	Allows(plan *catalog.Plan, binding *Record) (what string, ok bool)
	// Credentials builds what a bind or a GET answers of a finished
	// binding: from its record and its opened secret (as Work.SealCredentials
	// sealed it) either creds, a bucket's, or raw, a JSON object answered
	// verbatim.
	Credentials(rec *Record, secret []byte) (creds *Credentials, raw json.RawMessage, err error)
}

// Preparation is what Requests.Prepare may need beside the record.
type Preparation struct {
	// Look bounds a look at the backend before the intent is recorded
	// (zero: no look now; the operation's worker looks first).
	Look time.Duration
	// Instance is a binding's instance.
	Instance *Record
	// Predecessor is the binding a rotation rotates (nil: none); it
	// exists, is ready and is the same instance's.
	Predecessor *Record
}

// Errors an Operations method wraps to say how a step failed; anything else
// is transient, retried with backoff until the operation's deadline.
var (
	// ErrRefused: the backend refused the request for good (a 4xx no retry
	// fixes). The operation fails at once, and a synchronous request is
	// answered 422 with the backend's description.
	ErrRefused = errors.New("invalid request for this backend")
	// ErrNotOurs: what exists under the record's name or id was not made
	// by bucketbroker. The operation fails at once and it is left alone.
	ErrNotOurs = errors.New("resource exists and is owned by someone else")
	// ErrPermanent: no retry can make the step succeed (a bucket that
	// still holds objects, an owner mark someone removed). The operation
	// fails at once, as the broker's failure.
	ErrPermanent = errors.New("cannot succeed by retrying")
)

// Mark marks err with kind (ErrRefused, ErrNotOurs or ErrPermanent) for
// errors.Is, without adding kind's text to err's.
func Mark(err, kind error) error {
	if err == nil {
		return nil
	}
	return marked{err: err, kind: kind}
}

type marked struct{ err, kind error }

func (m marked) Error() string   { return m.err.Error() }
func (m marked) Unwrap() []error { return []error{m.kind, m.err} }

// givesUp reports whether err ends the operation at once.
func givesUp(err error) bool {
	return errors.Is(err, ErrRefused) || errors.Is(err, ErrNotOurs) || errors.Is(err, ErrPermanent)
}

// Described is a Backend's error whose text, for the log, holds what the
// platform has no use for (an upstream's address, a transport error):
// Description is what the operation's description, which a poll of
// last_operation shows, says of it instead. Error keeps the whole account.
type Described interface {
	error
	Description() string
}

// retrying is the operation's description while a step retries err.
func retrying(what string, err error) string {
	var d Described
	if errors.As(err, &d) {
		return fmt.Sprintf("%s: %s; retrying", what, d.Description())
	}
	return fmt.Sprintf("%s: backend error, retrying: %v", what, err)
}

// described is err's text for an operation's description: a Described
// error in it says its Description in place of its Error.
func described(err error) string {
	var d Described
	if !errors.As(err, &d) {
		return err.Error()
	}
	if text := err.Error(); strings.Contains(text, d.Error()) {
		return strings.Replace(text, d.Error(), d.Description(), 1)
	}
	return d.Description()
}

// backend returns the Backend that carries out rec's operations.
func (e *Engine) backend(rec *Record) (Backend, error) {
	if b, ok := e.backends[rec.Backend]; ok {
		return b, nil
	}
	return nil, fmt.Errorf("the %s service is not served by this process (start bucketbroker with it again)", rec.Backend)
}

// backendOf returns the Backend that serves serviceID.
func (e *Engine) backendOf(serviceID string) (Backend, error) {
	if b, ok := e.byService[serviceID]; ok {
		return b, nil
	}
	return nil, invalidf("service %q is served by no backend of this process", serviceID)
}

// indexBackends maps the backends by name and their services to them,
// refusing an unnamed or repeated backend and a service that is not in
// the catalog or that two backends claim.
func indexBackends(backends []Backend, cat *catalog.Catalog) (map[string]Backend, map[string]Backend, error) {
	byName, byService := map[string]Backend{}, map[string]Backend{}
	for _, b := range backends {
		name := b.Name()
		if name == "" {
			return nil, nil, errors.New("engine: a backend has no name")
		}
		if _, dup := byName[name]; dup {
			return nil, nil, fmt.Errorf("engine: two backends are named %q", name)
		}
		byName[name] = b
		for _, id := range b.ServiceIDs() {
			if other, dup := byService[id]; dup {
				return nil, nil, fmt.Errorf("engine: backends %q and %q both serve service %q", other.Name(), name, id)
			}
			if !cat.HasService(id) {
				return nil, nil, fmt.Errorf("engine: service %q of backend %q is not in the catalog", id, name)
			}
			byService[id] = b
		}
	}
	for _, s := range cat.Services {
		if _, ok := byService[s.ID]; !ok {
			return nil, nil, fmt.Errorf("engine: no backend serves service %q (the bucket service needs the bucket backend and its driver; an upstream's, the upstream)", s.Name)
		}
	}
	return byName, byService, nil
}
