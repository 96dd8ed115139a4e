package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

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
			return nil
		}
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
				e.kick(KindBinding, b.ID)
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
