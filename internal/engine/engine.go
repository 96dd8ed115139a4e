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
	go e.sweepEvery()
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
