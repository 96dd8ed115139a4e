package engine

import (
	"context"
	"errors"
	"fmt"
)

// maxCASRetries bounds how often a request re-reads a record that changed
// under it before it gives up with a concurrency error.
const maxCASRetries = 20

// creation is what a request that creates a resource (Provision, Bind)
// tells recordCreation.
type creation struct {
	kind Kind
	id   string
	// op is the operation that creates the resource: a record this type
	// of operation left failed is retried in place.
	op OpType
	// same reports whether rec, the record under id, was written by a
	// request identical to this one.
	same func(rec *Record) bool
	// check runs the request's checks that depend on the catalog (schema,
	// access, size): recordCreation runs it at most once, before it writes
	// or answers anything, except for an exact replay of a live resource.
	// That one is answered from its record, as it was accepted: a catalog
	// changed since (a tightened schema, an access taken out of a plan)
	// does not turn a duplicate of an accepted request into a 400, and a
	// replay, the hot path of a platform that re-sends, skips the schema
	// validation (docs/performance.md, BenchmarkReplayPUT).
	check func() error
	// fresh returns the record of a resource new under id; it may refuse.
	fresh func() (*Record, error)
	// again makes rec, deleted or failed by op, the record of a new
	// attempt, in place; it may refuse.
	again func(rec *Record) error
	// first, if not nil, is the read the caller made already: the loop's
	// first look uses it instead of reading again.
	first *stored
}

// stored is the answer of a Store.Get.
type stored struct {
	rec *Record
	err error
}

// read is the loop's look at the record: c.first the first time, when the
// caller has read it already, the store after that.
func (e *Engine) read(ctx context.Context, c *creation) (*Record, error) {
	if f := c.first; f != nil {
		c.first = nil
		return f.rec, f.err
	}
	return e.store.Get(ctx, c.kind, c.id)
}

// recordCreation is the compare-and-swap loop of the operations that
// create a resource. Read first: a re-sent request is answered from the
// record without a write. Else it writes the intent: a new record, whose
// insert stays the only arbiter between concurrent first requests, or a
// deleted or failed record made again, whose write loses to any write
// since the read. A write that lost reads again. It returns the record the
// request wrote and true (the caller starts its operation), or the record
// of an identical request a duplicate is answered from and false.
func (e *Engine) recordCreation(ctx context.Context, c creation) (*Record, bool, error) {
	checked := false
	for range maxCASRetries {
		rec, err := e.read(ctx, &c)
		found := err == nil
		if !found && !errors.Is(err, ErrNotFound) {
			return nil, false, e.storeErr(ctx, err)
		}
		same := found && c.same(rec)
		replay := same && rec.Phase != PhaseDeleted && rec.Phase != PhaseFailed
		if !replay && !checked {
			if err := c.check(); err != nil {
				return nil, false, err
			}
			checked = true
		}
		switch {
		case !found:
			rec, again, err := e.insertFresh(ctx, c)
			if again {
				continue // a concurrent duplicate won; answer from its record
			} else if err != nil {
				return nil, false, err
			}
			return rec, true, nil
		case rec.Phase == PhaseDeleted || (rec.Phase == PhaseFailed && same && rec.Op.Type == c.op):
			// Create again: a deleted id may be reused, a failed creation
			// is retried from the steps it has done.
			if err := c.again(rec); err != nil {
				return nil, false, err
			}
			if err := e.save(ctx, rec); errors.Is(err, ErrStale) {
				continue
			} else if err != nil {
				return nil, false, e.storeErr(ctx, err)
			}
			return rec, true, nil
		case !same:
			return nil, false, fmt.Errorf("%w: %s %s exists with different attributes", ErrConflict, c.kind, c.id)
		}
		return rec, false, nil
	}
	return nil, false, fmt.Errorf("%w: %s %s keeps changing", ErrConcurrency, c.kind, c.id)
}

// insertFresh writes the intent of a resource new under c.id. Requests of
// this process for one id take turns: while one makes its record (a look
// at the backend, then the insert through the store's one writer), the
// others wait for it and then read again, instead of each making the same
// look and an insert that can only lose (a storm of identical PUTs,
// BenchmarkProvisionStorm). The insert stays the only arbiter between
// processes. again means read the record again: a duplicate's insert won,
// or this request waited for another's attempt.
func (e *Engine) insertFresh(ctx context.Context, c creation) (_ *Record, again bool, _ error) {
	k := key(c.kind, c.id)
	e.mu.Lock()
	busy, waiting := e.creating[k]
	if !waiting {
		busy = make(chan struct{})
		e.creating[k] = busy
	}
	e.mu.Unlock()
	if waiting {
		select {
		case <-busy:
			return nil, true, nil
		case <-ctx.Done():
			return nil, false, fmt.Errorf("wait for the concurrent creation of %s %s: %w", c.kind, c.id, ctx.Err())
		}
	}
	defer func() {
		e.mu.Lock()
		delete(e.creating, k)
		e.mu.Unlock()
		close(busy)
	}()
	// The turn may have come after another request's whole turn, between
	// this request's read and now.
	if _, err := e.store.Get(ctx, c.kind, c.id); err == nil {
		return nil, true, nil
	} else if !errors.Is(err, ErrNotFound) {
		return nil, false, e.storeErr(ctx, err)
	}
	rec, err := c.fresh()
	if err != nil {
		return nil, false, err
	}
	if err := e.store.Insert(ctx, rec); errors.Is(err, ErrExists) {
		return nil, true, nil
	} else if err != nil {
		return nil, false, e.storeErr(ctx, err)
	}
	return rec, false, nil
}
