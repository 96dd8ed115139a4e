package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// A record's operation reaches its backend through one chain, each level
// with one job:
//
//	ensureWorker     makes sure a worker goroutine is on the record
//	startWorker      starts that goroutine, or tells the running one to pass again
//	runWorker        the goroutine: one pass per slot of the work queue
//	driveUnderLease  a pass: read the record, take its lease, run, retry
//	runOperation     runs one operation to its end, timed and logged
//	callBackend      calls the backend method for the operation's type

// worker is the one goroutine driving a record's operations in this process.
type worker struct {
	// first is the record as the request that started the worker wrote
	// it, so that the worker's first look needs no read (nil: read it).
	first *Record
	// halt is closed to make the worker stop at its next step boundary
	// (its operation was superseded); it is never closed twice.
	halt   chan struct{}
	halted bool
	again  bool
}

// ensureWorker makes sure a worker drives the record's current operation.
// A running worker is told to look again when it is done.
func (e *Engine) ensureWorker(kind Kind, id string) { e.startWorker(kind, id, nil) }

// ensureWorkerWith is ensureWorker from the request that just wrote rec:
// a worker it starts begins with rec instead of reading it.
func (e *Engine) ensureWorkerWith(rec *Record) { e.startWorker(rec.Kind, rec.ID, rec.Clone()) }

// startWorker starts the record's worker with first (nil: the worker reads
// the record), or marks the running one to pass again when it is done.
func (e *Engine) startWorker(kind Kind, id string, first *Record) {
	k := key(kind, id)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.base.Err() != nil {
		return
	}
	if w, ok := e.workers[k]; ok {
		w.again = true
		return
	}
	w := &worker{first: first}
	e.workers[k] = w
	e.wg.Add(1)
	go e.runWorker(kind, id, w, first != nil)
}

// interrupt makes the record's worker turn to the record's new operation:
// it stops at its next step boundary (a backend call in flight finishes
// first, so that nothing it does lands after the new operation's steps).
func (e *Engine) interrupt(kind Kind, id string) {
	e.supersede(kind, id)
	e.ensureWorker(kind, id)
}

// supersede is interrupt without ensureWorker, for a request that ensures
// the worker itself with the record it wrote (started): with no worker
// running, its ensureWorkerWith starts one with that record, which then
// needs no read (an ensureWorker here would start one that reads the
// record, and the request's call would make it pass again and read it once
// more after its operation ended).
func (e *Engine) supersede(kind Kind, id string) {
	e.mu.Lock()
	if w, ok := e.workers[key(kind, id)]; ok {
		w.again = true
		// The record it was handed is superseded: it must read the new one.
		w.first = nil
		// A worker that has not begun its pass has no halt channel yet
		// (closing nil would panic with e.mu held); it reads the record
		// when it begins, so it already turns to the new operation.
		if w.halt != nil && !w.halted {
			w.halted = true
			close(w.halt)
		}
	}
	e.mu.Unlock()
}

// haltKey carries a worker's halt channel in its context.
type haltKey struct{}

// errHalted stops an operation's worker between two steps; the operation
// stays as it is for whoever drives it next.
var errHalted = errors.New("worker halted")

// halted reports whether the worker running with ctx must stop: its
// operation was superseded or the engine is stopping.
func (e *Engine) halted(ctx context.Context) bool {
	if e.base.Err() != nil || ctx.Err() != nil {
		return true
	}
	if h, ok := ctx.Value(haltKey{}).(chan struct{}); ok {
		select {
		case <-h:
			return true
		default:
		}
	}
	return false
}

// runWorker is a record's worker goroutine. Each pass waits for a slot
// first (urgent when a request started the work or interrupted it), so that
// no more than Workers operations reach the store and the backend at once.
func (e *Engine) runWorker(kind Kind, id string, w *worker, urgent bool) {
	defer e.wg.Done()
	k := key(kind, id)
	for {
		if !e.slots.acquire(e.base, nil, nil, urgent) {
			e.mu.Lock()
			delete(e.workers, k)
			e.mu.Unlock()
			return
		}
		sl := &slot{s: e.slots, held: true}
		e.mu.Lock()
		w.halt, w.halted, w.again = make(chan struct{}), false, false
		ctx := context.WithValue(context.WithValue(e.calls, haltKey{}, w.halt), slotKey{}, sl)
		first := w.first
		w.first = nil
		e.mu.Unlock()

		e.driveUnderLease(ctx, kind, id, first)
		if sl.held {
			sl.held = false
			e.slots.release()
		}

		e.mu.Lock()
		if !w.again || e.base.Err() != nil {
			delete(e.workers, k)
			e.mu.Unlock()
			return
		}
		e.mu.Unlock()
		urgent = true // interrupted by a request
	}
}

// driveUnderLease is one pass of a worker: it reads the record, takes its
// operation's lease and runs the operation under it, again after a failure,
// until the operation is finished, the lease is lost, the worker is
// interrupted or the engine stops.
func (e *Engine) driveUnderLease(ctx context.Context, kind Kind, id string, first *Record) {
	for !e.halted(ctx) {
		// A record handed over may be stale by now: its first write is
		// then refused (compare-and-swap) and the loop reads it again.
		rec, err := first, error(nil)
		if first == nil {
			rec, err = e.store.Get(ctx, kind, id)
		}
		first = nil
		if err != nil {
			if !e.halted(ctx) && !errors.Is(err, ErrNotFound) {
				e.log.Error("Cannot read record; will retry", "kind", kind, "id", id, "error", err)
				e.sleep(ctx, time.Second)
				continue
			}
			return
		}
		if rec.Op.Finished() {
			return
		}
		if held, err := e.claim(ctx, rec); err != nil || !held {
			if err != nil && !errors.Is(err, ErrStale) && !e.halted(ctx) {
				e.log.Error("Cannot take the operation's lease; will retry", "kind", kind, "id", id, "error", err)
				e.tellFull(kind, id, err)
				e.sleep(ctx, time.Second)
			}
			if held || err != nil {
				continue
			}
			return // another live replica drives it
		}
		lctx, release := e.hold(ctx, rec)
		err = e.runOperation(lctx, rec)
		lost := errors.Is(context.Cause(lctx), errLeaseLost)
		ended := holderOf(lctx, rec).ended()
		release()
		if lost {
			// Another replica drives it now, or will once the lease
			// runs out (the sweep brings it back here if none does).
			return
		}
		if ended {
			// This worker's own write ended the operation: the record
			// needs no read to show it. A read could only find a later
			// write, and none of those is this worker's to drive:
			// ending the operation released the lease, so a write that
			// starts another one since holds its writer's lease. A
			// request of this process ensures this worker (the next pass
			// reads), another replica drives its own, and one that
			// dies leaves it to the sweep once its lease runs out.
			return
		}
		switch {
		case err == nil, errors.Is(err, ErrStale):
			// Superseded, or left unfinished: read the record again.
		case e.halted(ctx):
			return
		default:
			e.log.Error("Operation step failed; will retry", "kind", kind, "id", id, "operation", rec.Op.ID, "error", err)
			e.tellFull(kind, id, err)
			e.sleep(ctx, time.Second)
		}
	}
}

// runOperation carries out rec's current operation to its end, and times
// and logs it.
func (e *Engine) runOperation(ctx context.Context, rec *Record) error {
	start := time.Now()
	e.metrics.inFlight.WithLabelValues(string(rec.Op.Type)).Inc()
	defer e.metrics.inFlight.WithLabelValues(string(rec.Op.Type)).Dec()

	err := e.callBackend(ctx, rec)
	if err == nil {
		e.metrics.duration.WithLabelValues(string(rec.Op.Type), string(rec.Op.State)).Observe(time.Since(start).Seconds())
		lvl := slog.LevelInfo
		if rec.Op.State == OpFailed {
			lvl = slog.LevelWarn
		}
		e.log.Log(ctx, lvl, "Operation finished", "kind", rec.Kind, "id", rec.ID, "operation", rec.Op.ID,
			"type", rec.Op.Type, "state", rec.Op.State, "description", rec.Op.Description, "duration", time.Since(start))
	}
	return err
}

// callBackend hands rec's operation to the record's backend: the method
// for the operation's type.
func (e *Engine) callBackend(ctx context.Context, rec *Record) error {
	b, err := e.backend(rec)
	if err != nil {
		return e.finish(ctx, rec, err)
	}
	w := &Work{e: e, Rec: rec}
	switch rec.Op.Type {
	case OpProvision:
		return b.Provision(ctx, w)
	case OpUpdate:
		return b.Update(ctx, w)
	case OpDeprovision:
		return b.Deprovision(ctx, w)
	case OpBind:
		return b.Bind(ctx, w)
	case OpUnbind:
		return b.Unbind(ctx, w)
	default:
		return e.finish(ctx, rec, fmt.Errorf("unknown operation type %q", rec.Op.Type))
	}
}

// sleep waits d, or less when the worker is halted or the engine stops. A
// worker gives its slot back while it sleeps and queues for one after
// (behind the work requests have just started); when it is halted instead,
// it returns without one, and its caller stops at the halted check.
func (e *Engine) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	halt, _ := ctx.Value(haltKey{}).(chan struct{})
	sl, _ := ctx.Value(slotKey{}).(*slot)
	if sl != nil && sl.held {
		sl.held = false
		sl.s.release()
	}
	select {
	case <-ctx.Done():
	case <-e.base.Done():
	case <-halt: // nil (never ready) outside a worker
	case <-t.C:
		if sl != nil {
			sl.held = sl.s.acquire(ctx, halt, e.base.Done(), false)
		}
	}
}

// tellFull hands a worker's failed write to the requests waiting on its
// record when it failed for want of space: they answer that the store
// cannot write (503), as the request's own write would have, and the
// platform retries while the worker does.
func (e *Engine) tellFull(kind Kind, id string, err error) {
	if errors.Is(err, ErrFull) {
		e.notifyFull(kind, id, err)
	}
}
