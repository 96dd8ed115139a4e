package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// errLeaseLost is the cause of a worker context canceled because its
// operation's lease is no longer this engine's (another replica took it
// over, or it could not be renewed before it ran out).
var errLeaseLost = errors.New("operation lease lost")

// errFinished tells the holder that the operation it keeps the lease of
// has ended by its worker's own write: there is no lease left to keep.
var errFinished = errors.New("operation finished")

// holder keeps one record's lease while a worker drives it: it renews the
// lease on its own clock, whatever the worker is doing (a backend call that
// stalls longer than the lease included), and cancels the worker's context
// the moment the lease is no longer certainly this engine's, so that the
// worker makes no further backend call or write.
//
// A renewal is a compare-and-swap write of the record that changes only its
// lease. The worker's own writes go through the holder (save), which lets a
// write based on the version the worker last wrote or read skip over the
// holder's lease-only writes since: they changed nothing the worker wrote.
// A write by anyone else breaks that chain, and the worker's next write is
// refused (ErrStale) as without a holder.
type holder struct {
	e      *Engine
	kind   Kind
	id     string
	cancel context.CancelCauseFunc
	done   chan struct{}
	stop   chan struct{}

	mu sync.Mutex
	// base is the version the worker last wrote or read, cur the version
	// after the holder's lease-only writes since (cur == base without
	// them); base is -1 when someone else wrote since.
	base, cur int64
	// last is the record as last written or read, with version cur.
	last *Record
}

type holderKey struct{}

// hold starts keeping rec's lease, which this engine has just claimed, and
// returns the context the worker drives rec with: it is canceled, with
// cause errLeaseLost, when the lease is lost. release stops the keeping.
func (e *Engine) hold(ctx context.Context, rec *Record) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	h := &holder{e: e, kind: rec.Kind, id: rec.ID, cancel: cancel, done: make(chan struct{}), stop: make(chan struct{}),
		base: rec.Version, cur: rec.Version, last: rec.Clone()}
	go h.keep(ctx)
	return context.WithValue(ctx, holderKey{}, h), func() {
		close(h.stop)
		<-h.done
		cancel(nil)
	}
}

func holderOf(ctx context.Context, rec *Record) *holder {
	h, _ := ctx.Value(holderKey{}).(*holder)
	if h == nil || h.kind != rec.Kind || h.id != rec.ID {
		return nil
	}
	return h
}

// keep renews the lease every quarter of its TTL. A renewal that fails is
// tried again soon; when none has succeeded by a quarter of the lease
// before it runs out (no renewal attempt runs past that moment), the worker
// is stopped, so that its call in flight is cut off before another replica
// may take over.
func (h *holder) keep(ctx context.Context) {
	defer close(h.done)
	e := h.e
	every := e.leaseTTL / 4
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		until, err := h.renew(ctx)
		switch {
		case errors.Is(err, errFinished):
			return
		case errors.Is(err, errLeaseLost):
			e.metrics.leaseLost.Inc()
			e.log.Warn("Operation lease lost; stopping its worker", "kind", h.kind, "id", h.id)
			h.cancel(errLeaseLost)
			return
		case err != nil:
			if time.Until(until) <= every {
				e.metrics.leaseLost.Inc()
				e.log.Error("Cannot renew operation lease before it runs out; stopping its worker", "kind", h.kind, "id", h.id, "error", err)
				h.cancel(errLeaseLost)
				return
			}
			e.log.Warn("Cannot renew operation lease; will retry", "kind", h.kind, "id", h.id, "error", err)
			t.Reset(min(every/4, time.Until(until)-every))
		default:
			t.Reset(every)
		}
	}
}

// renew writes the lease forward and returns until when it is held. It
// returns errLeaseLost when the record shows that the lease is no longer
// this engine's, or that the operation has finished.
func (h *holder) renew(ctx context.Context) (time.Time, error) {
	e := h.e
	h.mu.Lock()
	defer h.mu.Unlock()
	held := h.last.LeaseUntil
	if h.last.Op.Finished() {
		return held, errFinished // the worker's last write ended it
	}
	// A renewal may not run past the moment the worker must stop: a
	// quarter of the lease before it runs out.
	sctx, cancel := context.WithTimeout(ctx, min(e.leaseTTL/4, time.Until(held)-e.leaseTTL/4))
	defer cancel()
	r := h.last.Clone()
	r.Version = h.cur
	r.Lease, r.LeaseUntil = e.replica, time.Now().UTC().Add(e.leaseTTL)
	err := e.store.Update(sctx, r)
	if errors.Is(err, ErrStale) {
		// Someone else wrote: a request that started another operation
		// (which keeps our lease), or a replica that took the lease over
		// or finished the operation. Look.
		var fresh *Record
		fresh, err = e.store.Get(sctx, h.kind, h.id)
		if err != nil {
			return held, fmt.Errorf("read record: %w", err)
		}
		if fresh.Lease != e.replica || fresh.Op.Finished() {
			return held, errLeaseLost
		}
		h.base, h.last = -1, fresh
		r = fresh.Clone()
		r.LeaseUntil = time.Now().UTC().Add(e.leaseTTL)
		err = e.store.Update(sctx, r)
	}
	if err != nil {
		return held, fmt.Errorf("renew lease: %w", err)
	}
	h.cur, h.last = r.Version, r
	e.metrics.leaseRenewals.Inc()
	return r.LeaseUntil, nil
}

// ended reports whether the worker's own last write ended the operation.
// The holder's renewals never write a finished operation (renew stops at
// one) and take none from a read (a finished one read is a lost lease), so
// a finished operation in last was written by the worker, and nothing
// through this holder since.
func (h *holder) ended() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last.Op.Finished()
}

// write is save's store write for the record the holder keeps: a record
// the worker last wrote or read at the base version is written over the
// holder's lease-only writes since.
func (h *holder) write(ctx context.Context, rec *Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rec.Version == h.base {
		rec.Version = h.cur
	}
	if err := h.e.store.Update(ctx, rec); err != nil {
		return err
	}
	h.base, h.cur, h.last = rec.Version, rec.Version, rec.Clone()
	return nil
}

// claim makes this engine the holder of rec's lease, unless another
// replica holds it and it has not expired. The claim is a compare-and-swap:
// of two replicas claiming at once, one wins.
func (e *Engine) claim(ctx context.Context, rec *Record) (bool, error) {
	now := time.Now()
	if rec.Lease != "" && rec.Lease != e.replica && now.Before(rec.LeaseUntil) {
		return false, nil
	}
	if rec.Lease == e.replica && rec.LeaseUntil.Sub(now) > e.leaseTTL/2 {
		return true, nil
	}
	prev := rec.Lease
	if err := e.save(ctx, rec); err != nil { // save renews our lease
		return false, err
	}
	if prev != "" && prev != e.replica {
		e.metrics.takeovers.Inc()
		e.log.Warn("Took over operation whose lease ran out", "kind", rec.Kind, "id", rec.ID, "operation", rec.Op.ID, "previous_lease", prev)
	}
	return true, nil
}

// renew extends the lease when half of it is gone, for callers that hold
// it without a holder (which renews on its own clock).
func (e *Engine) renew(ctx context.Context, rec *Record) error {
	if holderOf(ctx, rec) != nil {
		return nil
	}
	if rec.Lease == e.replica && time.Until(rec.LeaseUntil) > e.leaseTTL/2 {
		return nil
	}
	return e.save(ctx, rec)
}

// save writes rec (compare-and-swap) and wakes whoever waits on it. While
// the operation is unfinished the write renews this engine's lease; a
// finished operation holds none.
func (e *Engine) save(ctx context.Context, rec *Record) error {
	now := time.Now().UTC()
	if rec.Op.Finished() {
		rec.Lease, rec.LeaseUntil = "", time.Time{}
	} else if rec.Lease == "" || rec.Lease == e.replica || now.After(rec.LeaseUntil) {
		rec.Lease, rec.LeaseUntil = e.replica, now.Add(e.leaseTTL)
	}
	rec.UpdatedAt = now
	var err error
	if h := holderOf(ctx, rec); h != nil {
		err = h.write(ctx, rec)
	} else {
		err = e.store.Update(ctx, rec)
	}
	if err != nil {
		return err
	}
	e.notify(rec)
	return nil
}
