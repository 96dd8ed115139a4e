package engine

import (
	"container/list"
	"context"
	"sync"
	"time"
)

// slots bounds how many workers drive operations at once. Every record
// with unfinished work has a worker goroutine (they are cheap), but a
// worker makes store reads and backend calls only while it holds a slot;
// the others wait in a queue, first come first served, except that work a
// platform request has just started goes ahead of work resumed by a sweep
// or coming back from a retry's backoff. A worker gives its slot back
// while it waits (a backoff, a deprovision waiting for its bindings), so
// that retries against a failing backend never hold the slots new requests
// need, and a deprovision never waits on bindings that wait for its slot.
type slots struct {
	mu   sync.Mutex
	free int
	// urgent and later are the waiting workers, oldest first.
	urgent, later list.List
	metrics       *metrics
}

// waiter is one worker waiting for a slot; ready is closed when it is
// given one.
type waiter struct {
	ready chan struct{}
	since time.Time
}

// newSlots returns n slots; set metrics before the first acquire.
func newSlots(n int) *slots { return &slots{free: n} }

// acquire waits for a slot until ctx ends or stop1 or stop2 is closed
// (nil: never), and reports whether it got one.
func (s *slots) acquire(ctx context.Context, stop1, stop2 <-chan struct{}, urgent bool) bool {
	s.mu.Lock()
	if s.free > 0 && s.urgent.Len() == 0 && s.later.Len() == 0 {
		s.free--
		s.mu.Unlock()
		s.metrics.queueWait.Observe(0)
		return true
	}
	q := &s.later
	if urgent {
		q = &s.urgent
	}
	w := &waiter{ready: make(chan struct{}), since: time.Now()}
	el := q.PushBack(w)
	s.metrics.queueDepth.Inc()
	s.mu.Unlock()

	select {
	case <-w.ready:
		s.metrics.queueWait.Observe(time.Since(w.since).Seconds())
		return true
	case <-ctx.Done():
	case <-stop1:
	case <-stop2:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-w.ready:
		// Given a slot while giving up: hand it on.
		s.releaseLocked()
	default:
		q.Remove(el)
		s.metrics.queueDepth.Dec()
	}
	return false
}

// release gives a slot back, to the longest waiting urgent worker if any,
// else to the longest waiting other one.
func (s *slots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked()
}

func (s *slots) releaseLocked() {
	for _, q := range []*list.List{&s.urgent, &s.later} {
		if el := q.Front(); el != nil {
			q.Remove(el)
			s.metrics.queueDepth.Dec()
			close(el.Value.(*waiter).ready)
			return
		}
	}
	s.free++
}

// oldest is how long the longest waiting worker has waited (0: none).
func (s *slots) oldest() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var first time.Time
	for _, q := range []*list.List{&s.urgent, &s.later} {
		if el := q.Front(); el != nil {
			if t := el.Value.(*waiter).since; first.IsZero() || t.Before(first) {
				first = t
			}
		}
	}
	if first.IsZero() {
		return 0
	}
	return time.Since(first).Seconds()
}

// slotKey carries a worker's slot in its context, for sleep to give back.
type slotKey struct{}

// slot is the one slot a worker may hold.
type slot struct {
	s    *slots
	held bool
}
