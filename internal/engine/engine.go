package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bucketbroker/bucketbroker/internal/catalog"
	"github.com/bucketbroker/bucketbroker/internal/secretbox"
)

// Options configure an Engine. Store, Catalog and Box are required, and a
// backend for every service of the catalog.
type Options struct {
	Store   Store
	Catalog *catalog.Catalog
	Box     *secretbox.Box
	// Backends carry out the records' operations, each for its services
	// (Backend.ServiceIDs, each in Catalog).
	Backends []Backend
	// AsyncTimeout bounds an asynchronous operation; when it passes, the
	// operation fails (default 30 minutes).
	AsyncTimeout time.Duration
	// SyncTimeout bounds a synchronous operation and how long a synchronous
	// request waits for it (default 60 seconds).
	SyncTimeout time.Duration
	// SyncBudget is how long a request with accepts_incomplete=true waits
	// for an operation its plan does not require to be asynchronous: one
	// finished by then is answered as a synchronous one (201/200, a
	// binding's credentials included), one still running 202, and it
	// carries on as an asynchronous operation (zero: 202 at once).
	SyncBudget time.Duration
	// ReplicaID names this engine in operation leases. Engines sharing a
	// store need distinct ids; an engine restarted with its old id takes its
	// unfinished work back at once instead of waiting for leases to expire
	// (default: random).
	ReplicaID string
	// LeaseTTL is how long an operation's lease lasts without renewal; a
	// replica that dies holds its work that long (default 60 seconds).
	LeaseTTL time.Duration
	// SweepInterval is how often the engine looks for unfinished operations
	// that no live replica drives (default LeaseTTL/4).
	SweepInterval time.Duration
	// CallTimeout bounds each backend call; it must be shorter than
	// LeaseTTL, so that a call cut off when the lease is lost has ended
	// before another replica may take the operation over (default
	// LeaseTTL/2). A call that runs out is retried as a failed one.
	CallTimeout time.Duration
	// Workers is how many operations this engine drives at once; the
	// others wait in a queue, those a request has just started first
	// (default 32).
	Workers int
	// Logger receives operation logs (default slog.Default()).
	Logger *slog.Logger
	// Registerer receives the engine's metrics (nil: not registered).
	Registerer prometheus.Registerer
}

// Engine implements the idempotency contract for instances and bindings. It
// is safe for concurrent use.
type Engine struct {
	store    Store
	catalog  *catalog.Catalog
	box      *secretbox.Box
	asyncTTL time.Duration
	syncTTL  time.Duration
	// syncBudget: see Options.SyncBudget.
	syncBudget time.Duration
	replica    string
	leaseTTL   time.Duration
	sweepInt   time.Duration
	callTO     time.Duration
	log        *slog.Logger
	metrics    *metrics
	slots      *slots

	// base ends when the engine stops: workers stop at their next step
	// boundary. calls ends only when Shutdown's deadline passes: a backend
	// call in flight is let finish, because a call canceled on our side
	// may still be carried out by the server after we moved on.
	base        context.Context
	stop        context.CancelFunc
	calls       context.Context
	cancelCalls context.CancelFunc
	mu          sync.Mutex
	workers     map[string]*worker
	changed     map[string]*waiters
	// creating holds, for each record a request of this process is
	// inserting, a channel closed once it is done (insertFresh).
	creating map[string]chan struct{}
	wg       sync.WaitGroup
	// unreadable maps the records reportUnreadable has logged to the
	// version logged (under mu).
	unreadable map[string]int64
	// backends are Options.Backends by name; byService maps each of their
	// service ids to its backend.
	backends  map[string]Backend
	byService map[string]Backend
	// poll is how long a waiting request first waits for a write by this
	// process before it reads the store (a time.Duration; doubled up to a
	// second after each look). Tests that count reads lengthen it.
	poll atomic.Int64
}

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

// New returns an Engine. Call Start before serving requests.
func New(opts Options) (*Engine, error) {
	if opts.Store == nil || opts.Catalog == nil || opts.Box == nil {
		return nil, errors.New("engine: store, catalog and secret box are required")
	}
	if opts.AsyncTimeout <= 0 {
		opts.AsyncTimeout = 30 * time.Minute
	}
	if opts.SyncTimeout <= 0 {
		opts.SyncTimeout = 60 * time.Second
	}
	if opts.SyncBudget < 0 {
		return nil, fmt.Errorf("engine: negative sync budget (%s)", opts.SyncBudget)
	}
	if opts.SyncBudget >= opts.SyncTimeout {
		return nil, fmt.Errorf("engine: the sync budget (%s) must be shorter than the sync timeout (%s)", opts.SyncBudget, opts.SyncTimeout)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ReplicaID == "" {
		opts.ReplicaID = newID()
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = 60 * time.Second
	}
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = opts.LeaseTTL / 4
	}
	if opts.CallTimeout < 0 || opts.Workers < 0 {
		return nil, fmt.Errorf("engine: negative call timeout (%s) or workers (%d)", opts.CallTimeout, opts.Workers)
	}
	if opts.CallTimeout == 0 {
		opts.CallTimeout = opts.LeaseTTL / 2
	}
	if opts.CallTimeout >= opts.LeaseTTL {
		return nil, fmt.Errorf("engine: the backend call timeout (%s) must be shorter than the lease TTL (%s)", opts.CallTimeout, opts.LeaseTTL)
	}
	if opts.Workers == 0 {
		opts.Workers = 32
	}
	backends, byService, err := indexBackends(opts.Backends, opts.Catalog)
	if err != nil {
		return nil, err
	}
	sl := newSlots(opts.Workers)
	m, err := newMetrics(opts.Registerer, sl.oldest)
	if err != nil {
		return nil, err
	}
	sl.metrics = m
	base, stop := context.WithCancel(context.Background())
	calls, cancelCalls := context.WithCancel(context.Background())
	e := &Engine{
		store: opts.Store, catalog: opts.Catalog, box: opts.Box, asyncTTL: opts.AsyncTimeout,
		syncTTL: opts.SyncTimeout, syncBudget: opts.SyncBudget, log: opts.Logger, metrics: m,
		replica: opts.ReplicaID, leaseTTL: opts.LeaseTTL, sweepInt: opts.SweepInterval, callTO: opts.CallTimeout, slots: sl,
		base: base, stop: stop, calls: calls, cancelCalls: cancelCalls, workers: map[string]*worker{}, changed: map[string]*waiters{},
		creating: map[string]chan struct{}{},
		backends: backends, byService: byService,
	}
	e.poll.Store(int64(20 * time.Millisecond))
	return e, nil
}

// Start resumes every operation that was unfinished when the previous
// process stopped, and from then on, every SweepInterval, takes over the
// operations whose driving replica let its lease expire.
func (e *Engine) Start(ctx context.Context) error {
	if err := e.sweep(ctx); err != nil {
		return err
	}
	e.wg.Add(1)
	go func() {
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
	}()
	return nil
}

// sweep kicks every unfinished operation that no live replica drives.
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
			e.kick(r.Kind, r.ID)
		}
	}
	return nil
}

// Shutdown stops the workers at their next step boundary and waits for
// them; backend calls in flight are let finish until ctx ends, then
// canceled. Unfinished operations stay in progress in the store; the next
// Start resumes them.
func (e *Engine) Shutdown(ctx context.Context) error {
	e.stop()
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	select {
	case <-done:
		e.cancelCalls()
		return nil
	case <-ctx.Done():
		e.cancelCalls()
		return fmt.Errorf("wait for operations to stop: %w", ctx.Err())
	}
}

func key(kind Kind, id string) string { return string(kind) + "/" + id }

// kick makes sure a worker drives the record's current operation. A
// running worker is told to look again when it is done.
func (e *Engine) kick(kind Kind, id string) { e.start(kind, id, nil) }

// kickWith is kick from the request that just wrote rec.
func (e *Engine) kickWith(rec *Record) { e.start(rec.Kind, rec.ID, rec.Clone()) }

func (e *Engine) start(kind Kind, id string, first *Record) {
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
	go e.work(kind, id, w, first != nil)
}

// interrupt makes the record's worker turn to the record's new operation:
// it stops at its next step boundary (a backend call in flight finishes
// first, so that nothing it does lands after the new operation's steps).
func (e *Engine) interrupt(kind Kind, id string) {
	e.supersede(kind, id)
	e.kick(kind, id)
}

// supersede is interrupt without the kick, for a request that kicks the
// worker itself with the record it wrote (started): with no worker running,
// the kick starts one with that record, which then needs no read (a kick
// here first started one that read the record, and the request's kick
// made it pass again and read it once more after its operation ended).
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

// work is a record's worker. Each pass waits for a slot first (urgent
// when a request started the work or interrupted it), so that no more than
// Workers operations reach the store and the backend at once.
func (e *Engine) work(kind Kind, id string, w *worker, urgent bool) {
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

		e.drive(ctx, kind, id, first)
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

// drive runs the record's operations until one is finished, the worker is
// interrupted or the engine stops.
func (e *Engine) drive(ctx context.Context, kind Kind, id string, first *Record) {
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
				e.sleep(ctx, time.Second)
			}
			if held || err != nil {
				continue
			}
			return // another live replica drives it
		}
		lctx, release := e.hold(ctx, rec)
		err = e.run(lctx, rec)
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
			// request of this process kicks this worker (the next pass
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
			e.sleep(ctx, time.Second)
		}
	}
}

// run carries out rec's current operation to its end.
func (e *Engine) run(ctx context.Context, rec *Record) error {
	start := time.Now()
	e.metrics.inFlight.WithLabelValues(string(rec.Op.Type)).Inc()
	defer e.metrics.inFlight.WithLabelValues(string(rec.Op.Type)).Dec()

	err := e.runOn(ctx, rec)
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

// runOn hands rec's operation to the record's backend.
func (e *Engine) runOn(ctx context.Context, rec *Record) error {
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
// tell what other processes wrote.
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

// storeErr turns a store failure into an answer for the platform: 503,
// unless the request itself has ended (then the caller is gone anyway).
// A store that answers but cannot write is not one that cannot be
// reached: the answer names the cause an operator has to fix.
func (e *Engine) storeErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return err
	}
	if errors.Is(err, ErrFull) {
		e.log.Error("Store cannot write", "error", err)
		return fmt.Errorf("%w: the broker's store cannot write: %w", ErrUnavailable, ErrFull)
	}
	e.log.Error("Store unavailable", "error", err)
	return fmt.Errorf("%w: the broker's store cannot be reached", ErrUnavailable)
}

func (e *Engine) newOp(t OpType, async bool, identity string) Operation {
	ttl := e.syncTTL
	if async {
		ttl = e.asyncTTL
	}
	now := time.Now().UTC()
	return Operation{ID: newID(), Type: t, State: OpInProgress, Async: async, Identity: identity,
		StartedAt: now, Deadline: now.Add(ttl), Description: string(t) + " in progress"}
}

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
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

type metrics struct {
	inFlight      *prometheus.GaugeVec
	duration      *prometheus.HistogramVec
	takeovers     prometheus.Counter
	leaseLost     prometheus.Counter
	leaseRenewals prometheus.Counter
	retries       *prometheus.CounterVec
	queueDepth    prometheus.Gauge
	queueWait     prometheus.Histogram
	queueOldest   prometheus.GaugeFunc
	budget        *prometheus.CounterVec
}

// newMetrics makes the engine's metrics; oldest reports the age of the
// work queue's oldest entry.
func newMetrics(reg prometheus.Registerer, oldest func() float64) (*metrics, error) {
	m := &metrics{
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bucketbroker_operations_in_flight",
			Help: "Operations being driven by this process, by type.",
		}, []string{"type"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bucketbroker_operation_duration_seconds",
			Help:    "Time to drive an operation to its end, by type and final state.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"type", "state"}),
		takeovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bucketbroker_lease_takeovers_total",
			Help: "Operations this process took over from another replica whose lease had run out.",
		}),
		leaseLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bucketbroker_leases_lost_total",
			Help: "Operations whose worker this process stopped because their lease was taken over or could not be renewed in time.",
		}),
		leaseRenewals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bucketbroker_lease_renewals_total",
			Help: "Lease renewals written while a worker drove an operation.",
		}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bucketbroker_backend_retries_total",
			Help: "Backend calls that failed and were tried again, by step.",
		}, []string{"step"}),
		queueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bucketbroker_work_queue_depth",
			Help: "Operations waiting for one of the engine's workers.",
		}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "bucketbroker_work_queue_wait_seconds",
			Help:    "Time an operation waited in the queue for a worker.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		queueOldest: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "bucketbroker_work_queue_oldest_seconds",
			Help: "Age of the operation that has waited longest in the queue for a worker (0: none waits).",
		}, oldest),
	}
	m.budget = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bucketbroker_sync_budget_answers_total",
		Help: "Requests with accepts_incomplete=true that waited the sync budget, by operation type and answer: finished (answered as synchronous) or accepted (202, still running).",
	}, []string{"type", "answer"})
	for _, t := range []OpType{OpProvision, OpUpdate, OpDeprovision, OpBind, OpUnbind} {
		m.inFlight.WithLabelValues(string(t)) // show zero before the first operation
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.inFlight, m.duration, m.takeovers, m.leaseLost, m.leaseRenewals,
			m.retries, m.queueDepth, m.queueWait, m.queueOldest, m.budget} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("register metrics: %w", err)
			}
		}
	}
	return m, nil
}
