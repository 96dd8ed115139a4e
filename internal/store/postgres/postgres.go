package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/store"
)

// defaultConnectTimeout bounds how long opening a connection waits for a
// server that does not answer (a host that is down drops packets rather
// than refusing them) when the DSN sets no connect_timeout. It is shorter
// than the engine's request deadlines, so that a request gets the store's
// error (OSB 503) rather than running out of time.
const defaultConnectTimeout = 5 * time.Second

// defaultMaxConns is the pool size when the DSN sets no pool_max_conns.
const defaultMaxConns = 10

// callTimeout bounds each call of a Store, whatever its caller's context
// says: a server that stops answering without closing its connections (a
// frozen process, a network partition: no RST, no FIN) keeps a pooled
// connection open, and only a deadline ends a call waiting on it. The
// engine turns the failed call into OSB 503, so that a request is answered
// within about this long while the database does not answer. A healthy
// call is a single statement that waits for one WAL flush; a List may take
// longer, and is given this long without a row rather than in all.
const callTimeout = 3 * time.Second

// defaultPingTimeout bounds the ping of a connection taken from the pool
// after it has been idle (more than a second, pgxpool's rule) when the DSN
// sets no pool_ping_timeout: a connection that does not answer it in time
// is closed, and the call tries another or a new one within what is left
// of callTimeout.
const defaultPingTimeout = time.Second

var _ engine.Store = (*Store)(nil)

// Store is an engine.Store kept in a PostgreSQL database. It is safe for
// concurrent use, and any number of Stores, in any number of processes, may
// share one database.
type Store struct {
	pool *pgxpool.Pool
	// unreadable holds the records reads could not decode (List skips them).
	unreadable store.Unreadables
	// writes remembers a write that failed for want of space (Writable).
	writes store.Writes
}

const (
	getSQL    = `SELECT version, data FROM records WHERE kind = $1 AND id = $2`
	insertSQL = `
		INSERT INTO records (kind, id, instance_id, resource_name, phase, op_state, version, created_at, updated_at, data)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
		ON CONFLICT (kind, id) DO NOTHING`
	updateSQL = `
		UPDATE records
		SET instance_id = $1, resource_name = $2, phase = $3, op_state = $4, version = $5, created_at = $6, updated_at = $7, data = $8
		WHERE kind = $9 AND id = $10 AND version = $11`
	existsSQL = `SELECT 1 FROM records WHERE kind = $1 AND id = $2`
)

// Open connects to the PostgreSQL database named by dsn (a postgres:// URL
// or a keyword=value string, as libpq and pgx read them, including the
// pool_* settings of pgxpool) and brings its schema up to date. The tables
// live in the first schema of the connection's search_path.
func Open(ctx context.Context, dsn string) (*Store, error) {
	return OpenWith(ctx, dsn, store.OpenOptions{})
}

// OpenWith is Open with opts: a database with no schema gets one only as
// opts allow (store.CheckNew). The store keeps no evidence of its own that
// records were kept before: the database is all there is of it.
func OpenWith(ctx context.Context, dsn string, opts store.OpenOptions) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx masks the passwords it recognizes in its parse errors.
		return nil, fmt.Errorf("open postgres store: %w", err)
	}
	cc := cfg.ConnConfig
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = defaultConnectTimeout
	}
	if _, ok := cc.RuntimeParams["application_name"]; !ok {
		// Lets an operator tell the broker's sessions apart in
		// pg_stat_activity.
		cc.RuntimeParams["application_name"] = "bucketbroker"
	}
	if opts.ReadOnly {
		// Every transaction of the store's sessions is read-only: the
		// server refuses a write.
		cc.RuntimeParams["default_transaction_read_only"] = "on"
	}
	if _, set := cc.RuntimeParams["synchronous_commit"]; !set {
		cfg.AfterConnect = requireDurableCommit
	}
	if cfg.PingTimeout <= 0 {
		cfg.PingTimeout = defaultPingTimeout
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		// pgxpool's default, one connection per CPU and at least 4, fits
		// work that burns CPU. A store call mostly waits, for the network
		// and for the server's WAL fsync, and concurrent commits share
		// one fsync: measured with BenchmarkInsertGet, 10 connections
		// double parallel inserts over 4 and keep reads from queueing
		// behind writes.
		cfg.MaxConns = defaultMaxConns
	}
	where := net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))) + "/" + cc.Database

	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres store %s: %w", where, err)
	}
	if err := checkEncoding(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres store %s: %w", where, callErr(ctx, err))
	}
	prepare := func() error { return migrate(ctx, pool, func() error { return store.CheckNew(opts, nil) }) }
	if opts.ReadOnly {
		prepare = func() error { return checkSchema(ctx, pool) }
	}
	if err := prepare(); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres store %s: %w", where, callErr(ctx, err))
	}
	return &Store{pool: pool}, nil
}

// requireDurableCommit makes a new session wait for its commits to be
// durable: the engine answers a platform after a write returns and relies on
// that write surviving a crash. A server, database or role configured with
// synchronous_commit off (or local, which on a primary with synchronous
// standbys does not wait for them) is overridden for the store's sessions;
// stronger settings (remote_apply, remote_write) are kept. A DSN that sets
// synchronous_commit itself is the operator's explicit choice and is not
// overridden.
func requireDurableCommit(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, `
		SELECT set_config('synchronous_commit', 'on', false)
		WHERE current_setting('synchronous_commit') IN ('off', 'local')`)
	if err != nil {
		return fmt.Errorf("set synchronous_commit: %w", err)
	}
	return nil
}

// Close closes every connection, waiting for calls in progress to return
// them. Calls after Close fail. The error is always nil; it is there so that
// both stores close the same way.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// Insert implements engine.Store.
func (s *Store) Insert(ctx context.Context, r *engine.Record) error {
	c, data, err := store.ForInsert(r)
	if err != nil {
		return fmt.Errorf("insert record %s/%s: %w", r.Kind, r.ID, err)
	}

	// One statement: the primary key decides which of two concurrent
	// inserts wins, in this process or another; the loser waits for the
	// winner's transaction to end and then inserts nothing.
	call, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	tag, err := s.pool.Exec(call, insertSQL,
		string(c.Kind), c.ID, c.InstanceID, c.ResourceName(), string(c.Phase), string(c.Op.State), c.Version,
		c.CreatedAt, c.UpdatedAt, string(data))
	if err != nil {
		return fmt.Errorf("insert record %s/%s: %w", r.Kind, r.ID, s.writeFailed(callErr(ctx, err)))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("insert record %s/%s: %w", r.Kind, r.ID, engine.ErrExists)
	}
	s.writes.Note(nil)
	r.Version, r.CreatedAt, r.UpdatedAt = c.Version, c.CreatedAt, c.UpdatedAt
	return nil
}

// Get implements engine.Store.
func (s *Store) Get(ctx context.Context, kind engine.Kind, id string) (*engine.Record, error) {
	var version int64
	var data []byte
	call, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	err := s.pool.QueryRow(call, getSQL, string(kind), id).Scan(&version, &data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("get record %s/%s: %w", kind, id, engine.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get record %s/%s: %w", kind, id, callErr(ctx, err))
	}
	r, err := store.Decode(version, data)
	if err != nil {
		s.unreadable.Note(engine.UnreadableRecord{Kind: kind, ID: id, Version: version, Error: err.Error()})
		return nil, fmt.Errorf("get record %s/%s: %w", kind, id, err)
	}
	s.unreadable.Readable(kind, id)
	return r, nil
}

// Update implements engine.Store.
func (s *Store) Update(ctx context.Context, r *engine.Record) error {
	c, data, err := store.ForUpdate(r)
	if err != nil {
		return fmt.Errorf("update record %s/%s: %w", r.Kind, r.ID, err)
	}

	// Compare-and-swap in one statement. A concurrent UPDATE of the same
	// row makes this one wait for it and then re-check the WHERE clause
	// against the row it wrote (READ COMMITTED), so two writers from the
	// same read never both succeed.
	call, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	tag, err := s.pool.Exec(call, updateSQL,
		c.InstanceID, c.ResourceName(), string(c.Phase), string(c.Op.State), c.Version,
		c.CreatedAt, c.UpdatedAt, string(data),
		string(c.Kind), c.ID, r.Version)
	if err != nil {
		return fmt.Errorf("update record %s/%s: %w", r.Kind, r.ID, s.writeFailed(callErr(ctx, err)))
	}
	if tag.RowsAffected() == 0 {
		// Only now find out why: records are never deleted, so a row that
		// exists here existed at the UPDATE and had another version.
		var one int
		err := s.pool.QueryRow(call, existsSQL, string(r.Kind), r.ID).Scan(&one)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("update record %s/%s: %w", r.Kind, r.ID, engine.ErrNotFound)
		case err != nil:
			return fmt.Errorf("update record %s/%s: %w", r.Kind, r.ID, callErr(ctx, err))
		}
		return fmt.Errorf("update record %s/%s at version %d: %w", r.Kind, r.ID, r.Version, engine.ErrStale)
	}
	s.writes.Note(nil)
	r.Version, r.CreatedAt, r.UpdatedAt = c.Version, c.CreatedAt, c.UpdatedAt
	return nil
}

// List implements engine.Store.
func (s *Store) List(ctx context.Context, opts engine.ListOptions) ([]*engine.Record, error) {
	if opts.Limit != 0 || opts.After != (engine.RecordKey{}) || opts.ByName {
		return s.listPage(ctx, opts)
	}
	var where []string
	var args []any
	if opts.Kind != "" {
		args = append(args, string(opts.Kind))
		where = append(where, "kind = $"+strconv.Itoa(len(args)))
	}
	if opts.InstanceID != "" {
		args = append(args, opts.InstanceID)
		where = append(where, "instance_id = $"+strconv.Itoa(len(args)))
	}
	if opts.Unfinished {
		// A literal, not a parameter: the planner uses the partial index
		// records_unfinished only when the query implies its predicate.
		where = append(where, "op_state = "+quote(string(engine.OpInProgress)))
	}
	query := "SELECT kind, id, instance_id, version, data FROM records"
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	// kind and id are COLLATE "C": byte order, Go's string order.
	query += " ORDER BY kind, id"

	call, progress, cancel := whileAnswering(ctx)
	defer cancel()
	rows, err := s.pool.Query(call, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list records: %w", callErr(ctx, err))
	}
	defer rows.Close()
	var out []*engine.Record
	for rows.Next() {
		progress()
		var raw store.Raw
		if err := rows.Scan(&raw.Kind, &raw.ID, &raw.InstanceID, &raw.Version, &raw.Data); err != nil {
			return nil, fmt.Errorf("list records: %w", callErr(ctx, err))
		}
		if r, ok := store.DecodeListed(&s.unreadable, raw); ok {
			out = append(out, r)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list records: %w", callErr(ctx, err))
	}
	return out, nil
}

// whileAnswering returns a context that ends callTimeout after it was made
// or progress was last called, whichever is later, or when ctx ends: a
// List that receives rows goes on for as long as it has rows to read.
func whileAnswering(ctx context.Context) (_ context.Context, progress func(), cancel context.CancelFunc) {
	call, stop := context.WithCancel(ctx)
	t := time.AfterFunc(callTimeout, stop)
	return call, func() { t.Reset(callTimeout) }, func() { t.Stop(); stop() }
}

// Unreadable implements engine.UnreadableReporter.
func (s *Store) Unreadable() []engine.UnreadableRecord { return s.unreadable.List() }

// GetRaw implements store.RawStore.
func (s *Store) GetRaw(ctx context.Context, kind engine.Kind, id string) (store.Raw, error) {
	raw := store.Raw{Kind: kind, ID: id}
	call, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	err := s.pool.QueryRow(call, `SELECT instance_id, version, data FROM records WHERE kind = $1 AND id = $2`, string(kind), id).
		Scan(&raw.InstanceID, &raw.Version, &raw.Data)
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Raw{}, fmt.Errorf("get record %s/%s: %w", kind, id, engine.ErrNotFound)
	}
	if err != nil {
		return store.Raw{}, fmt.Errorf("get record %s/%s: %w", kind, id, callErr(ctx, err))
	}
	return raw, nil
}

// ScanRaw implements store.RawStore.
func (s *Store) ScanRaw(ctx context.Context, fn func(store.Raw) error) error {
	call, progress, cancel := whileAnswering(ctx)
	defer cancel()
	rows, err := s.pool.Query(call, `SELECT kind, id, instance_id, version, data FROM records ORDER BY kind, id`)
	if err != nil {
		return fmt.Errorf("scan records: %w", callErr(ctx, err))
	}
	defer rows.Close()
	for rows.Next() {
		progress()
		var raw store.Raw
		if err := rows.Scan(&raw.Kind, &raw.ID, &raw.InstanceID, &raw.Version, &raw.Data); err != nil {
			return fmt.Errorf("scan records: %w", callErr(ctx, err))
		}
		if err := fn(raw); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("scan records: %w", callErr(ctx, err))
	}
	return nil
}

// errNoAnswer replaces a timeout of the store's or of pgx's own; see
// callErr.
var errNoAnswer = errors.New("postgres server did not answer in time")

// callErr returns the error of a database call made with ctx. The store
// bounds each call with a context of its own (callTimeout), and pgx
// enforces connect_timeout with one too, so a server that does not answer
// produces an error that matches context.DeadlineExceeded or
// context.Canceled although the caller's context is still live. The engine passes the caller's
// context errors through as they are and turns every other store error
// into "unavailable" (OSB 503); a timeout that is not the caller's must not
// look like the caller's, so its chain is cut here (%v, not %w).
func callErr(ctx context.Context, err error) error {
	if ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
		return fmt.Errorf("%w: %s", errNoAnswer, err.Error()) // the text only: see above
	}
	return err
}

// quote returns s as an SQL string literal.
func quote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
