package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// notify wakes the waits on rec, which this process has just written, and
// hands them the record as written (see watch).
func (e *Engine) notify(rec *Record) {
	k := key(rec.Kind, rec.ID)
	e.mu.Lock()
	defer e.mu.Unlock()
	w, ok := e.changed[k]
	if !ok {
		return
	}
	// Two writes of this process may notify out of their commit order
	// (two goroutines, each between its commit and this lock): the
	// newer version stays.
	if w.last == nil || rec.Version > w.last.Version {
		w.last = rec.Clone()
	}
	w.full = nil
	close(w.ch)
	w.ch = make(chan struct{})
}

// notifyFull wakes the waits on a record whose worker could not write it
// for want of space (err is an ErrFull), so that a request waiting for the
// operation answers now that the store cannot write, rather than when its
// wait runs out. The worker goes on retrying; the record's next write
// here clears it.
func (e *Engine) notifyFull(kind Kind, id string, err error) {
	k := key(kind, id)
	e.mu.Lock()
	defer e.mu.Unlock()
	w, ok := e.changed[k]
	if !ok {
		return
	}
	w.full = err
	close(w.ch)
	w.ch = make(chan struct{})
}

// waiters is what the waits on one record in this process share: the
// channel the record's next write here closes (then replaced), the record
// as the newest write here since the first of them began left it, and how
// many waits hold them.
type waiters struct {
	ch chan struct{}
	// last is never changed once set, only replaced: waits read it as
	// it is.
	last *Record
	// full is the error of the worker's last write of the record, when it
	// failed for want of space and none has succeeded since.
	full error
	n    int
}

// watch is one wait on a record's writes in this process. The map holds
// only records that something waits on: the last release of a record's
// waiters drops them, also for a request whose operation finished before
// it looked (else its channel would stay for good, one per resource).
type watch struct {
	e *Engine
	k string
	w *waiters
	// ch is the channel this wait listens on: closed at the record's first
	// write here since it was taken.
	ch <-chan struct{}
}

// watch starts a wait on the record's writes in this process; the caller
// must release it once it stops waiting.
func (e *Engine) watch(kind Kind, id string) *watch {
	k := key(kind, id)
	e.mu.Lock()
	defer e.mu.Unlock()
	w, ok := e.changed[k]
	if !ok {
		w = &waiters{ch: make(chan struct{})}
		e.changed[k] = w
	}
	w.n++
	return &watch{e: e, k: k, w: w, ch: w.ch}
}

func (wt *watch) release() {
	e := wt.e
	e.mu.Lock()
	defer e.mu.Unlock()
	wt.w.n--
	if wt.w.n == 0 && e.changed[wt.k] == wt.w {
		delete(e.changed, wt.k)
	}
}

// next waits until the record is written in this process, poll passes or
// ctx ends (then the error). After a write it returns the record as the
// newest write of this process left it, a write committed since the
// channel was taken (or just before, its notify after), so a version the
// store held at a moment of this wait; after poll, nil: only the store can
// tell what other processes wrote. After a write that failed for want of
// space (notifyFull), it returns that error.
func (wt *watch) next(ctx context.Context, poll time.Duration) (*Record, error) {
	t := time.NewTimer(poll)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, nil
	case <-wt.ch:
	}
	e := wt.e
	e.mu.Lock()
	defer e.mu.Unlock()
	wt.ch = wt.w.ch // taken with last: a write after it closes this one
	if wt.w.full != nil {
		return nil, wt.w.full
	}
	return wt.w.last, nil
}

// waiting is how many records something in this process waits on.
func (e *Engine) waiting() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.changed)
}

// wait blocks until operation opID of the record has finished or has been
// superseded, and returns the record as it then is (not to be changed: it
// may be another wait's too). It listens for this process's writes and
// polls the store, so that it also sees writes by other processes.
//
// wt, when not nil, was taken after the caller's own write of the record
// at version seen and before anything could write it again here (the
// worker it started): the first look waits for a write. With wt nil the
// caller's copy may be older than any watch: the first look reads. wait
// releases wt.
//
// A record a write of this process hands over (watch.next) stands for a
// read: it is what the store held at that version, which a read at that
// moment of the wait would have returned, and the answer is derived from
// it as from a read. One that is not newer than what this wait has seen
// (a notify that came late, after a newer write or read) may be stale: the
// store is read instead.
func (e *Engine) wait(ctx context.Context, wt *watch, kind Kind, id, opID string, seen int64) (*Record, error) {
	read := wt == nil
	if read {
		wt = e.watch(kind, id)
	}
	defer wt.release()
	poll := time.Duration(e.poll.Load())
	for {
		var rec *Record
		if !read {
			handed, err := wt.next(ctx, poll)
			if errors.Is(err, ErrFull) {
				return nil, e.storeErr(ctx, err)
			}
			if err != nil {
				return nil, fmt.Errorf("%w: operation %s is still in progress after %s", ErrFailed, opID, e.syncTTL)
			}
			if handed != nil && handed.Version > seen {
				rec = handed
			}
			poll = min(poll*2, time.Second)
		}
		read = false
		if rec == nil {
			var err error
			if rec, err = e.store.Get(ctx, kind, id); err != nil {
				return nil, e.storeErr(ctx, err)
			}
		}
		if rec.Op.ID != opID || rec.Op.Finished() {
			return rec, nil
		}
		seen = rec.Version
	}
}
