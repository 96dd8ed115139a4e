package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/bucketbroker/bucketbroker/pkg/driver"
)

// Backend carries out the operations of the records of the services it
// serves. The engine records the intent, answers duplicates from the
// record, picks the backend per record and hands it the record's current
// operation; each method drives that operation to its end (with
// Work.Finish or Work.Fail, returning what they return) or returns the
// error that interrupted it (the operation then stays in progress, for the
// engine to resume). Every step must be idempotent: a step repeated after a
// crash must find and adopt what the previous attempt made.
//
// Two implementations exist: the bucket backend (the S3 + IAM driver,
// bucketBackend in this package) and an upstream OSB broker
// (internal/upstream).
type Backend interface {
	Provision(ctx context.Context, w *Work) error
	Update(ctx context.Context, w *Work) error
	Deprovision(ctx context.Context, w *Work) error
	Bind(ctx context.Context, w *Work) error
	Unbind(ctx context.Context, w *Work) error
}

// Upstream is a Backend for the services of one upstream OSB broker.
type Upstream interface {
	Backend
	// Name names the upstream in records (Record.Upstream) and logs.
	Name() string
	// ServiceIDs are the ids of the upstream's services bucketbroker
	// serves (each also in the engine's catalog).
	ServiceIDs() []string
}

// Errors a Backend wraps to say how a step failed; anything else is
// transient, retried with backoff until the operation's deadline.
var (
	// ErrRefused: the backend refused the request for good (a 4xx no retry
	// fixes). The operation fails at once, and a synchronous request is
	// answered 422 with the backend's description.
	ErrRefused = driver.ErrInvalid
	// ErrNotOurs: what exists under the record's name or id was not made
	// by bucketbroker. The operation fails at once and it is left alone.
	ErrNotOurs = driver.ErrOwnedByOther
)

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

// Work is what a Backend gets from the engine to carry out one operation:
// the record, retried steps, durable saves and the secret box. It is valid
// for one call of a Backend method.
type Work struct {
	e *Engine
	// Rec is the record, whose Op is the operation to carry out. The
	// backend changes its own fields in it and makes them durable with
	// Save before it relies on them.
	Rec *Record
}

// Step runs one idempotent backend call, retrying failures other than
// ErrRefused and ErrNotOurs with exponential backoff and jitter until the
// operation's deadline (then the error ends the operation). It renews the
// lease, bounds each call by the engine's call timeout, and stops when the
// worker is halted. While it retries, the operation's description says
// why, for pollers.
func (w *Work) Step(ctx context.Context, what string, call func(context.Context) error) error {
	return w.e.step(ctx, w.Rec, what, call)
}

// Save writes the record (compare-and-swap). ErrStale means another
// holder wrote it: the backend must stop without further side effects.
func (w *Work) Save(ctx context.Context) error { return w.e.save(ctx, w.Rec) }

// Finish ends the operation: succeeded when err is nil, else failed with
// err's text as its description (refused, answered 422, when err wraps
// ErrRefused).
func (w *Work) Finish(ctx context.Context, err error) error { return w.e.finish(ctx, w.Rec, err) }

// Fail ends the operation with err, unless err only means that the worker
// was interrupted or superseded: then the operation stays as it is.
func (w *Work) Fail(ctx context.Context, err error) error { return w.e.fail(ctx, w.Rec, err) }

// Interrupted reports whether err only means that the worker was halted,
// superseded or stopped: the operation is not over and must not be ended.
func (w *Work) Interrupted(ctx context.Context, err error) bool { return w.e.interrupted(ctx, err) }

// Wait pauses the operation for d, or until its deadline if that comes
// first (it gives its worker slot back meanwhile), renewing the lease. It
// returns an error that ends the operation when its deadline has passed,
// and one that interrupts it when the worker is halted.
func (w *Work) Wait(ctx context.Context, d time.Duration, what string) error {
	if time.Now().After(w.Rec.Op.Deadline) {
		return giveUp{fmt.Errorf("%s: still not done at the operation deadline", what)}
	}
	if err := w.e.renew(ctx, w.Rec); err != nil {
		return err
	}
	w.e.sleep(ctx, retryWait(d, time.Until(w.Rec.Op.Deadline)))
	if w.e.halted(ctx) {
		return errHalted
	}
	return nil
}

// Progress sets the operation's description (what a poll of
// last_operation shows) and saves it, if it changed.
func (w *Work) Progress(ctx context.Context, desc string) error {
	if w.Rec.Op.Description == desc {
		return nil
	}
	w.Rec.Op.Description = desc
	return w.Save(ctx)
}

// SealCredentials seals a binding's credentials (an opaque JSON value)
// into the record, bound to the record's id. The caller saves the record.
func (w *Work) SealCredentials(creds json.RawMessage) error {
	sealed, err := w.e.box.Seal(creds, sealContext(w.Rec))
	if err != nil {
		return fmt.Errorf("seal credentials: %w", err)
	}
	w.Rec.SealedSecret = sealed
	return nil
}

// RevokeBindings turns every live binding of the instance into an unbind,
// which each binding's own worker carries out through its backend, and
// waits until all are deleted.
func (w *Work) RevokeBindings(ctx context.Context) error { return w.e.revokeBindings(ctx, w.Rec) }

// Identity is the X-Broker-API-Originating-Identity header of the request
// that started the operation, as the platform sent it (empty when it sent
// none). The unbinds a deprovision starts carry the deprovision's.
func (w *Work) Identity() string { return w.Rec.Op.Identity }

// Logger is the engine's logger, for the backend's own lines. Never log
// credentials.
func (w *Work) Logger() *slog.Logger { return w.e.log }

// bucketBackend is the Backend of the bucket service: a bucket and a
// credential made through the S3 + IAM driver (the steps in steps.go).
type bucketBackend struct{ e *Engine }

func (b bucketBackend) Provision(ctx context.Context, w *Work) error {
	return b.e.provision(ctx, w.Rec)
}

func (b bucketBackend) Update(ctx context.Context, w *Work) error { return b.e.update(ctx, w.Rec) }

func (b bucketBackend) Deprovision(ctx context.Context, w *Work) error {
	return b.e.deprovision(ctx, w.Rec)
}

func (b bucketBackend) Bind(ctx context.Context, w *Work) error { return b.e.bind(ctx, w.Rec) }

func (b bucketBackend) Unbind(ctx context.Context, w *Work) error { return b.e.unbind(ctx, w.Rec) }

// backend returns the Backend that carries out rec's operations: the
// upstream the record names, else the bucket backend.
func (e *Engine) backend(rec *Record) (Backend, error) {
	if rec.Upstream == "" && e.driver == nil {
		return nil, errors.New("the bucket service is not served by this process (started with --bucket-service=false)")
	}
	if rec.Upstream == "" {
		return bucketBackend{e}, nil
	}
	if u, ok := e.upstreams[rec.Upstream]; ok {
		return u, nil
	}
	return nil, fmt.Errorf("upstream %q is not configured (start bucketbroker with it again)", rec.Upstream)
}

// upstreamOf names the upstream that serves serviceID ("" for the bucket
// service).
func (e *Engine) upstreamOf(serviceID string) string { return e.byService[serviceID] }
