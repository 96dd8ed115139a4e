package store

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/bucketbroker/bucketbroker/internal/engine"
)

// Full marks err, a write's failure for want of space, as engine.ErrFull.
// It reads as err: the driver's own words.
func Full(err error) error { return fullError{err} }

type fullError struct{ err error }

func (e fullError) Error() string   { return e.err.Error() }
func (e fullError) Unwrap() []error { return []error{e.err, engine.ErrFull} }

// ProbeInterval is the least time between two probes of Writes.Check.
const ProbeInterval = time.Second

// Writes remembers whether a store's writes fail for want of space, so
// that readiness reports a store that cannot write. It costs nothing while
// writes succeed: a write that failed with engine.ErrFull is remembered
// until one succeeds, and Check reports it until then. Because a broker
// that is not ready gets no requests, and so makes no writes, Check itself
// tries a write (the store's probe), at most once per ProbeInterval. The
// zero value remembers no failure.
type Writes struct {
	mu     sync.Mutex
	failed error     // the last write's failure, when it was ErrFull
	probed time.Time // when Check last started a probe
}

// Note records the outcome of a write: nil clears a remembered failure,
// an ErrFull is remembered, any other error (a duplicate, a stale version,
// a caller who gave up) says nothing about space and changes nothing.
func (w *Writes) Note(err error) {
	if err != nil && !errors.Is(err, engine.ErrFull) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failed = err
}

// Check returns nil if the store can write, as far as it knows: no write
// failed for want of space since the last one that succeeded. Otherwise it
// runs probe, a small real write, unless one ran less than ProbeInterval
// ago: nil from probe clears the failure; its error, or the remembered
// failure, is returned.
func (w *Writes) Check(ctx context.Context, probe func(context.Context) error) error {
	w.mu.Lock()
	failed := w.failed
	if failed == nil || time.Since(w.probed) < ProbeInterval {
		w.mu.Unlock()
		return failed
	}
	w.probed = time.Now()
	w.mu.Unlock()

	err := probe(ctx)
	w.Note(err)
	if err != nil && !errors.Is(err, engine.ErrFull) {
		return errors.Join(failed, err)
	}
	return err
}
