package engine

import (
	"context"
	"fmt"
	"time"
)

// sweep ensures a worker for every unfinished operation that no live
// replica drives.
func (e *Engine) sweep(ctx context.Context) error {
	recs, err := e.store.List(ctx, ListOptions{Unfinished: true})
	if err != nil {
		return fmt.Errorf("list unfinished operations: %w", err)
	}
	e.reportUnreadable(ctx)
	now := time.Now()
	for _, r := range recs {
		if r.Lease != "" && r.Lease != e.replica && now.Before(r.LeaseUntil) {
			continue
		}
		e.mu.Lock()
		_, running := e.workers[key(r.Kind, r.ID)]
		e.mu.Unlock()
		if !running {
			e.log.Info("Resuming operation", "kind", r.Kind, "id", r.ID, "operation", r.Op.ID, "type", r.Op.Type, "previous_lease", r.Lease)
			e.ensureWorker(r.Kind, r.ID)
		}
	}
	return nil
}

// sweepEvery sweeps every SweepInterval until the engine stops; it is one
// of the engine's goroutines (wg).
func (e *Engine) sweepEvery() {
	defer e.wg.Done()
	t := time.NewTicker(e.sweepInt)
	defer t.Stop()
	for {
		select {
		case <-e.base.Done():
			return
		case <-t.C:
			if err := e.sweep(e.base); err != nil && e.base.Err() == nil {
				e.log.Warn("Cannot look for unfinished operations; will retry", "error", err)
			}
		}
	}
}
