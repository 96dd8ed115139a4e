package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"
)

// Work is what a Backend gets from the engine to carry out one operation:
// the record, retried steps, durable saves and the secret box. It is valid
// for one call of a Backend method.
type Work struct {
	e *Engine
	// Rec is the record, whose Op is the operation to carry out. The
	// backend changes its own part of it (Record.Bucket, Record.Upstream)
	// and makes it durable with Save before it relies on it.
	Rec *Record
}

// Step runs one idempotent backend call, retrying failures other than
// ErrRefused, ErrNotOurs and ErrPermanent with exponential backoff and
// jitter until the operation's deadline (then the error ends the
// operation). It renews the lease, bounds each call by the engine's call
// timeout, and stops when the worker is halted. While it retries, the
// operation's description says why, for pollers.
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

// SealCredentials seals a binding's secret (its credentials, opaque to the
// engine, which hands them back to Requests.Credentials) into the record,
// bound to the record's id. The caller saves the record.
func (w *Work) SealCredentials(secret []byte) error {
	sealed, err := w.e.box.Seal(secret, sealContext(w.Rec))
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

// Stored reads the record as the store holds it now (a write that failed
// may still have been committed), for a holder that has to check before it
// undoes what it made.
func (w *Work) Stored(ctx context.Context) (*Record, error) {
	return w.e.store.Get(ctx, w.Rec.Kind, w.Rec.ID)
}

// CallTimeout bounds one backend call (Options.CallTimeout), for a call
// made outside Step.
func (w *Work) CallTimeout() time.Duration { return w.e.callTO }

// Identity is the X-Broker-API-Originating-Identity header of the request
// that started the operation, as the platform sent it (empty when it sent
// none). The unbinds a deprovision starts carry the deprovision's.
func (w *Work) Identity() string { return w.Rec.Op.Identity }

// Logger is the engine's logger, for the backend's own lines. Never log
// credentials.
func (w *Work) Logger() *slog.Logger { return w.e.log }

// giveUp marks an error that ends the operation (permanent, or past the
// deadline) as opposed to one that only interrupts the worker.
type giveUp struct{ err error }

func (g giveUp) Error() string { return g.err.Error() }
func (g giveUp) Unwrap() error { return g.err }

// step runs one idempotent backend call, retrying transient errors with
// exponential backoff and full jitter until the operation's deadline. While
// it retries, the operation's description says why, for pollers.
func (e *Engine) step(ctx context.Context, rec *Record, what string, call func(context.Context) error) error {
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		if e.halted(ctx) {
			return errHalted
		}
		if err := e.renew(ctx, rec); err != nil {
			return err
		}
		// Shorter than the lease: a call cut off when the lease is lost
		// has ended before another replica may take over.
		cctx, cancel := context.WithTimeout(ctx, e.callTO)
		err := call(cctx)
		cancel()
		if err == nil {
			e.metrics.calls.WithLabelValues(what, "ok").Inc()
			return nil
		}
		e.metrics.calls.WithLabelValues(what, "error").Inc()
		if e.halted(ctx) {
			return errHalted
		}
		if errors.Is(err, ErrStale) {
			// A write within the call was refused: another holder
			// wrote the record, and this one must do nothing more.
			return err
		}
		if givesUp(err) {
			return giveUp{fmt.Errorf("%s: %w", what, err)}
		}
		if time.Now().After(rec.Op.Deadline) {
			return giveUp{fmt.Errorf("%s: gave up after %d attempts at the operation deadline: %w", what, attempt, err)}
		}
		desc := retrying(what, err)
		if rec.Op.Description != desc {
			rec.Op.Description = desc
			if err := e.save(ctx, rec); err != nil {
				return err
			}
		}
		e.metrics.retries.WithLabelValues(what).Inc()
		e.log.Warn("Backend call failed; retrying", "kind", rec.Kind, "id", rec.ID, "step", what, "attempt", attempt, "error", err)
		e.sleep(ctx, retryWait(rand.N(backoff), time.Until(rec.Op.Deadline)))
		backoff = min(2*backoff, 30*time.Second)
	}
}

// retryWait is how long a step waits before its next attempt: the drawn
// backoff, but never past the operation's deadline (left is the time to
// it), so that the last attempt runs at the deadline and a failure then
// ends the operation. A wait drawn past it (the backoff grows to 30 s)
// kept a failed operation in progress that long after its deadline, and a
// synchronous request, which waits a few seconds beyond the deadline,
// was answered "still in progress" instead of the failure.
func retryWait(drawn, left time.Duration) time.Duration {
	return min(drawn, max(left, 0)) + time.Millisecond
}

// fail ends the operation with err, unless err only means the worker was
// interrupted or superseded: then the operation stays as it is.
func (e *Engine) fail(ctx context.Context, rec *Record, err error) error {
	var g giveUp
	if errors.As(err, &g) || (!e.halted(ctx) && !errors.Is(err, ErrStale) && !errors.Is(err, errHalted) && !errors.Is(err, context.Canceled)) {
		return e.finish(ctx, rec, err)
	}
	return err
}

// finish ends the record's operation: with success when err is nil, with
// failure otherwise, and moves the record to the phase that follows.
func (e *Engine) finish(ctx context.Context, rec *Record, err error) error {
	op := &rec.Op
	op.EndedAt = time.Now().UTC()
	if err == nil {
		op.State, op.Description = OpSucceeded, string(op.Type)+" succeeded"
	} else {
		op.State, op.Description = OpFailed, fmt.Sprintf("%s failed: %s", op.Type, described(err))
		// The backend refused the request for good (an invalid tag, an
		// option it does not have): the request's fault, not ours, and
		// answered so (422), never as the broker's own failure (500).
		op.Refused = errors.Is(err, ErrRefused)
	}
	ok := err == nil
	switch op.Type {
	case OpProvision, OpBind:
		rec.Phase = pick(ok, PhaseReady, PhaseFailed)
	case OpUpdate:
		rec.Phase = PhaseReady // a failed update leaves the instance as it was
		if ok && op.Target != nil {
			rec.Request = *op.Target
		}
	case OpDeprovision, OpUnbind:
		rec.Phase = pick(ok, PhaseDeleted, PhaseFailed)
		if ok {
			rec.SealedSecret = nil // never keep the secret of a revoked key
		}
	default:
		rec.Phase = PhaseFailed
	}
	return e.save(ctx, rec)
}

func pick[T any](cond bool, a, b T) T {
	if cond {
		return a
	}
	return b
}

// revokeBindings turns every live binding of the instance into an unbind
// and waits until all are deleted. Each binding's own worker revokes it, so
// a bind still running is halted before its credential is revoked.
func (e *Engine) revokeBindings(ctx context.Context, inst *Record) error {
	poll := 20 * time.Millisecond
	for {
		bindings, err := e.store.List(ctx, ListOptions{Kind: KindBinding, InstanceID: inst.ID})
		if err != nil {
			return err
		}
		pending, failed := 0, 0
		for _, b := range bindings {
			if b.Phase == PhaseDeleted {
				continue
			}
			pending++
			switch {
			case b.Op.Type == OpUnbind && !b.Op.Finished():
				e.ensureWorker(KindBinding, b.ID)
			case b.Op.Type == OpUnbind && b.Op.State == OpFailed:
				failed++
				fallthrough
			default:
				// The deprovision's originating identity: the
				// platform user who caused this unbind.
				b.startOp(e.newOp(OpUnbind, true, inst.Op.Identity))
				b.Op.Deadline = inst.Op.Deadline
				b.startDeletion()
				if err := e.save(ctx, b); err != nil && !errors.Is(err, ErrStale) {
					return err
				}
				e.interrupt(KindBinding, b.ID)
			}
		}
		// A binding the store cannot read is skipped by List, but its
		// user may hold a live key: wait for its repair, and say so.
		unreadable := e.unreadableBindings(inst.ID)
		pending += len(unreadable)
		if pending == 0 {
			return nil
		}
		if time.Now().After(inst.Op.Deadline) {
			if len(unreadable) > 0 {
				return giveUp{fmt.Errorf("%d of its bindings could not be revoked before the deadline (%d failed; %s cannot be read: repair with `bucketbroker admin records repair`, then deprovision again)",
					pending, failed, strings.Join(unreadable, ", "))}
			}
			return giveUp{fmt.Errorf("%d of its bindings could not be revoked before the deadline (%d failed)", pending, failed)}
		}
		if err := e.renew(ctx, inst); err != nil {
			return err
		}
		e.sleep(ctx, poll)
		if e.halted(ctx) {
			return errHalted
		}
		poll = min(2*poll, time.Second)
	}
}

// interrupted reports whether err only means that the worker was halted,
// superseded or stopped (as fail tells them apart): the operation is not
// over, and must not be ended.
func (e *Engine) interrupted(ctx context.Context, err error) bool {
	if err == nil {
		return false
	}
	var g giveUp
	return !errors.As(err, &g) && (e.halted(ctx) || errors.Is(err, ErrStale) || errors.Is(err, errHalted) || errors.Is(err, context.Canceled))
}

func sealContext(rec *Record) string { return "binding/" + rec.ID }
