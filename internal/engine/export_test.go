package engine

import (
	"context"
	"time"
)

// Waiting exposes how many records something in e waits on, for tests.
func Waiting(e *Engine) int { return e.waiting() }

// SetWaitPoll sets how long a waiting request first waits for a write by
// this process before it reads the store: a test that counts reads makes
// it longer than the test, so that only writes wake a wait.
func SetWaitPoll(e *Engine, d time.Duration) { e.poll.Store(int64(d)) }

// StartWait starts a wait on rec's operation as a request that has just
// written rec does, before anything else can write it here, and returns
// the rest of the wait: what it answers.
func StartWait(e *Engine, rec *Record) func(context.Context) (*Record, error) {
	wt := e.watch(rec.Kind, rec.ID)
	return func(ctx context.Context) (*Record, error) {
		return e.wait(ctx, wt, rec.Kind, rec.ID, rec.Op.ID, rec.Version)
	}
}

// Notify tells the waits on rec that this process has just written it.
func Notify(e *Engine, rec *Record) { e.notify(rec) }

// SaveHandedOver saves rec as the engine's own writes do and returns the
// record that write hands to a request waiting on it.
func SaveHandedOver(ctx context.Context, e *Engine, rec *Record) (*Record, error) {
	wt := e.watch(rec.Kind, rec.ID)
	defer wt.release()
	if err := e.save(ctx, rec); err != nil {
		return nil, err
	}
	return wt.next(ctx, time.Hour)
}

// WaitIdle waits until no worker of e runs (each ends a little after the
// write that answered its request), or d passes: it reports which.
func WaitIdle(e *Engine, d time.Duration) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(time.Millisecond) {
		e.mu.Lock()
		n := len(e.workers)
		e.mu.Unlock()
		if n == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}
