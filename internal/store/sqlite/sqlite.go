package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/bucketbroker/bucketbroker/internal/engine"
	"github.com/bucketbroker/bucketbroker/internal/store"
)

// busyTimeout bounds how long a statement waits for a lock held by another
// connection (another Store on the same file, or another process) before it
// fails. The caller's context can end the wait sooner.
const busyTimeout = 10 * time.Second

// timeLayout is how the created_at and updated_at columns are written: UTC,
// fixed width, so that the text sorts in time order.
const timeLayout = "2006-01-02T15:04:05.000000000Z"

var _ engine.Store = (*Store)(nil)

// Store is an engine.Store kept in one SQLite database file. It is safe for
// concurrent use.
type Store struct {
	// writer has exactly one connection: every write in this process is
	// queued by database/sql instead of contending for SQLite's write lock.
	writer *sql.DB
	// readers serve Get and List concurrently with the writer (WAL).
	readers *sql.DB
	// Prepared once: parsing SQL costs more than a Get itself.
	get, insert, update *sql.Stmt
	// decoded keeps records as Get last decoded them, by key: a Get that
	// finds the same version in the file reuses it instead of decoding the
	// JSON again (most of a Get's work; replays and polls read records
	// that rarely change).
	decoded decodedCache
	// wal maps the WAL-index header, which every commit to the file, from
	// any connection or process, rewrites: a Get that finds it as it was
	// before the record was last read answers from decoded without a
	// statement. nil (or unmapped) where it cannot be mapped.
	wal *walIndex
	// pin is a reader connection held open for the Store's life, so that
	// this process keeps SQLite's lock on the -shm file that wal maps.
	pin *sql.Conn
	// unreadable holds the records reads could not decode (List skips them).
	unreadable store.Unreadables
	// writes remembers a write that failed for want of space (Writable).
	writes store.Writes
}

const (
	// getSQL reads a record's version, and its data only when the version
	// is not the one given (the one decoded already).
	getSQL    = `SELECT version, CASE WHEN version = ? THEN NULL ELSE data END FROM records WHERE kind = ? AND id = ?`
	insertSQL = `
		INSERT INTO records (kind, id, instance_id, resource_name, phase, op_state, version, created_at, updated_at, data)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (kind, id) DO NOTHING`
	updateSQL = `
		UPDATE records
		SET instance_id = ?, resource_name = ?, phase = ?, op_state = ?, version = ?, created_at = ?, updated_at = ?, data = ?
		WHERE kind = ? AND id = ? AND version = ?`
)

// Open opens the store in the SQLite database file at path, creating the
// file (0600) and its directory (0700) if they do not exist, and brings its
// schema up to date. A database with no schema whose marker says that it
// held records is refused (store.ErrLost).
func Open(ctx context.Context, path string) (*Store, error) {
	return OpenWith(ctx, path, store.OpenOptions{})
}

// OpenWith is Open with opts: a database with no schema gets one only as
// opts and the marker allow (store.CheckNew).
func OpenWith(ctx context.Context, path string, opts store.OpenOptions) (*Store, error) {
	if path == "" {
		return nil, errors.New("open sqlite store: empty path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	isNew := func() error { return store.CheckNew(opts, func() error { return markerSays(abs) }) }
	if opts.ReadOnly {
		// SQLite would write its header into an empty file.
		if _, err := os.Stat(abs); err != nil || emptyFile(abs) {
			return nil, fmt.Errorf("open sqlite store %s: %w", abs, errors.Join(store.CheckSchema(0, len(migrations)), err))
		}
	} else {
		// Asked here too, before the file is created or SQLite writes its
		// header into it, so that a refused start changes nothing; the
		// migration asks again for a file that has bytes but no schema.
		if emptyFile(abs) {
			if err := isNew(); err != nil {
				return nil, fmt.Errorf("open sqlite store %s: %w", abs, err)
			}
		}
		if err := createFile(abs); err != nil {
			return nil, fmt.Errorf("open sqlite store %s: %w", abs, err)
		}
	}

	// Read-only, the writer is query_only as the readers are: its writes
	// fail, and nothing else in the store writes.
	writer, err := sql.Open("sqlite", dsn(abs, opts.ReadOnly))
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w", abs, err)
	}
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxLifetime(0)
	writer.SetConnMaxIdleTime(0)

	// Migrate before the readers open, so that they only ever see a database
	// that is already in WAL mode and at the current schema.
	if opts.ReadOnly {
		err = checkSchema(ctx, writer)
	} else if err = migrate(ctx, writer, isNew); err == nil {
		// After the schema's commit: a crash in between leaves a database
		// with a schema and no marker, which the next Open marks.
		err = writeMarker(abs)
	}
	if err != nil {
		_ = writer.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", abs, err)
	}

	readers, err := sql.Open("sqlite", dsn(abs, true))
	if err != nil {
		_ = writer.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", abs, err)
	}
	n := max(4, runtime.GOMAXPROCS(0)) + 1 // one is pin
	readers.SetMaxOpenConns(n)
	readers.SetMaxIdleConns(n)
	pin, err := pinWAL(ctx, readers)
	if err != nil {
		_ = writer.Close()
		_ = readers.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", abs, err)
	}
	st := &Store{writer: writer, readers: readers, pin: pin, wal: openWALIndex(shmBase(abs))}
	for _, p := range []struct {
		db    *sql.DB
		query string
		stmt  **sql.Stmt
	}{{readers, getSQL, &st.get}, {writer, insertSQL, &st.insert}, {writer, updateSQL, &st.update}} {
		if *p.stmt, err = p.db.PrepareContext(ctx, p.query); err != nil {
			_ = st.Close()
			return nil, fmt.Errorf("open sqlite store %s: prepare: %w", abs, err)
		}
	}
	return st, nil
}

// shmBase is the path SQLite names the -wal and -shm files after: the
// database file's, symbolic links resolved (as SQLite resolves them).
func shmBase(path string) string {
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		return resolved
	}
	return path
}

// pinWAL takes a reader connection out of the pool and makes it read the
// database, which opens (and, first in this process, locks) its -shm file.
func pinWAL(ctx context.Context, readers *sql.DB) (*sql.Conn, error) {
	c, err := readers.Conn(ctx)
	if err != nil {
		return nil, err
	}
	var n int
	if err := c.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&n); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// createFile creates the database file with mode 0600 and its directory
// with 0700 when they are missing. SQLite would create the file with 0644
// (less the umask); the -wal and -shm files it creates later copy the mode
// of the database file, so creating it first is enough for all three.
//
// An existing file is not opened at all: closing any descriptor of a file
// drops the POSIX locks this process holds on it, which would silently
// release the locks of another Store open on the same file.
func createFile(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return f.Close()
}

// dsn returns the modernc.org/sqlite data source name for the file at path.
// The PRAGMAs are per connection (journal_mode is also persistent), so they
// go in the DSN, which the driver applies to every connection it opens.
func dsn(path string, readOnly bool) string {
	q := url.Values{}
	q.Set("_busy_timeout", strconv.FormatInt(busyTimeout.Milliseconds(), 10))
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", "FULL")
	q.Set("_foreign_keys", "on")
	if readOnly {
		q.Set("_query_only", "on")
	} else {
		// Transactions (only migrations use one) take the write lock at
		// BEGIN: a deferred transaction that reads and then writes can fail
		// with SQLITE_BUSY at once, without waiting, when another
		// connection wrote in between.
		q.Set("_txlock", "immediate")
	}
	u := url.URL{
		Scheme:   "file",
		Path:     "/" + strings.TrimPrefix(filepath.ToSlash(path), "/"),
		RawQuery: q.Encode(),
	}
	return u.String()
}

// Close closes the database. Calls after Close fail.
func (s *Store) Close() error {
	// Before the connections close: from then on another process may
	// reinitialize the -shm file under the mapping.
	s.wal.forget()
	var errs []error
	for _, st := range []*sql.Stmt{s.get, s.insert, s.update} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	if err := s.pin.Close(); !errors.Is(err, sql.ErrConnDone) { // closed by an earlier Close
		errs = append(errs, err)
	}
	errs = append(errs, s.readers.Close(), s.writer.Close())
	// After the connections: they hold SQLite's locks on the -shm file.
	return errors.Join(append(errs, s.wal.release())...)
}

// Insert implements engine.Store.
func (s *Store) Insert(ctx context.Context, r *engine.Record) error {
	c, data, err := store.ForInsert(r)
	if err != nil {
		return fmt.Errorf("insert record %s/%s: %w", r.Kind, r.ID, err)
	}

	before, _ := s.wal.header()
	// One statement: the primary key decides which of two concurrent
	// inserts wins; there is no window between a check and the write.
	res, err := s.insert.ExecContext(ctx,
		c.Kind, c.ID, c.InstanceID, c.ResourceName(), c.Phase, c.Op.State, c.Version,
		formatTime(c.CreatedAt), formatTime(c.UpdatedAt), string(data))
	if err != nil {
		err = s.writeFailed(err)
		return fmt.Errorf("insert record %s/%s: %w", r.Kind, r.ID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("insert record %s/%s: %w", r.Kind, r.ID, err)
	}
	if n == 0 {
		return fmt.Errorf("insert record %s/%s: %w", r.Kind, r.ID, engine.ErrExists)
	}
	s.writes.Note(nil)
	s.wal.checkCommitted(before)
	r.Version, r.CreatedAt, r.UpdatedAt = c.Version, c.CreatedAt, c.UpdatedAt
	return nil
}

// Get implements engine.Store.
func (s *Store) Get(ctx context.Context, kind engine.Kind, id string) (*engine.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("get record %s/%s: %w", kind, id, err)
	}
	// The header first, then the read: a commit between the two makes
	// the header found later differ from this one, never the other way.
	at, atOK := s.wal.header()
	cached := s.decoded.get(kind, id)
	if atOK && cached.atOK && cached.at == at {
		// Nothing was committed to the file since the read that found
		// this record current, or found none.
		if cached.r == nil {
			return nil, fmt.Errorf("get record %s/%s: %w", kind, id, engine.ErrNotFound)
		}
		return cached.r.Clone(), nil
	}
	var known int64 // versions start at 1
	if cached.r != nil {
		known = cached.r.Version
	}
	var version int64
	var data []byte
	// Without cancellation: with a context that can end, database/sql and
	// the driver each start a goroutine per query to watch it, which cost
	// more CPU than the query itself. A read in WAL mode does not wait for
	// the writer; what it can wait for (a checkpoint's or recovery's lock)
	// is bounded by busyTimeout.
	err := s.get.QueryRowContext(context.WithoutCancel(ctx), known, kind, id).Scan(&version, &data)
	if errors.Is(err, sql.ErrNoRows) {
		// Kept too: identical requests for a new id (a storm of PUTs)
		// each look before one of them inserts.
		s.decoded.put(kind, id, decoded{at: at, atOK: atOK})
		return nil, fmt.Errorf("get record %s/%s: %w", kind, id, engine.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get record %s/%s: %w", kind, id, err)
	}
	if data == nil && cached.r != nil && version == known {
		// Versions only grow, by one per committed write, and records are
		// never deleted: the same version is the same record.
		s.decoded.put(kind, id, decoded{r: cached.r, at: at, atOK: atOK})
		return cached.r.Clone(), nil
	}
	r, err := store.Decode(version, data)
	if err != nil {
		s.unreadable.Note(engine.UnreadableRecord{Kind: kind, ID: id, Version: version, Error: err.Error()})
		return nil, fmt.Errorf("get record %s/%s: %w", kind, id, err)
	}
	s.unreadable.Readable(kind, id)
	s.decoded.put(kind, id, decoded{r: r.Clone(), at: at, atOK: atOK})
	return r, nil
}

// decodedCacheSize bounds the records a Store keeps decoded (a few KiB
// each).
const decodedCacheSize = 4096

// decodedCache maps a record's key to the record as last decoded, or to
// none when the last read found none. It is only ever a shortcut: Get
// checks the version in the file first, or that the WAL-index header is
// the one it read before the record was last found current (or missing),
// so records written by another Store or process are never missed.
type decodedCache struct {
	mu sync.Mutex
	m  map[decodedKey]decoded
}

type decodedKey struct {
	kind engine.Kind
	id   string
}

// decoded is a record (owned by the cache: never changed, only cloned),
// or nil for none, and the WAL-index header read before a read that found
// it current (at, when atOK). An entry without a record is only ever used
// with its header.
type decoded struct {
	r    *engine.Record
	at   walHeader
	atOK bool
}

func (c *decodedCache) get(kind engine.Kind, id string) decoded {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[decodedKey{kind, id}]
}

// put keeps d; when full, it first forgets an arbitrary record.
func (c *decodedCache) put(kind engine.Kind, id string, d decoded) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[decodedKey]decoded)
	}
	k := decodedKey{kind, id}
	if _, ok := c.m[k]; !ok && len(c.m) >= decodedCacheSize {
		for old := range c.m {
			delete(c.m, old)
			break
		}
	}
	c.m[k] = d
}

// Update implements engine.Store.
func (s *Store) Update(ctx context.Context, r *engine.Record) error {
	c, data, err := store.ForUpdate(r)
	if err != nil {
		return fmt.Errorf("update record %s/%s: %w", r.Kind, r.ID, err)
	}

	before, _ := s.wal.header()
	// Compare-and-swap in one statement: the version check and the write
	// cannot be separated by another writer.
	res, err := s.update.ExecContext(ctx,
		c.InstanceID, c.ResourceName(), c.Phase, c.Op.State, c.Version,
		formatTime(c.CreatedAt), formatTime(c.UpdatedAt), string(data),
		c.Kind, c.ID, r.Version)
	if err != nil {
		err = s.writeFailed(err)
		return fmt.Errorf("update record %s/%s: %w", r.Kind, r.ID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("update record %s/%s: %w", r.Kind, r.ID, err)
	}
	if n == 0 {
		// Only now find out why: records are never deleted, so a row that
		// exists here existed at the UPDATE and had another version.
		var one int
		err := s.readers.QueryRowContext(ctx,
			`SELECT 1 FROM records WHERE kind = ? AND id = ?`, r.Kind, r.ID).Scan(&one)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("update record %s/%s: %w", r.Kind, r.ID, engine.ErrNotFound)
		case err != nil:
			return fmt.Errorf("update record %s/%s: %w", r.Kind, r.ID, err)
		}
		return fmt.Errorf("update record %s/%s at version %d: %w", r.Kind, r.ID, r.Version, engine.ErrStale)
	}
	s.writes.Note(nil)
	s.wal.checkCommitted(before)
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
		where = append(where, "kind = ?")
		args = append(args, opts.Kind)
	}
	if opts.InstanceID != "" {
		where = append(where, "instance_id = ?")
		args = append(args, opts.InstanceID)
	}
	if opts.Unfinished {
		where = append(where, "op_state = ?")
		args = append(args, engine.OpInProgress)
	}
	query := "SELECT kind, id, instance_id, version, data FROM records"
	if len(where) > 0 {
		query += " WHERE " + strings.Join(where, " AND ")
	}
	// SQLite compares TEXT with memcmp (the BINARY collation): byte order,
	// the same order as Go's string comparison.
	query += " ORDER BY kind, id"

	rows, err := s.readers.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list records: %w", err)
	}
	defer rows.Close()
	var out []*engine.Record
	for rows.Next() {
		var raw store.Raw
		if err := rows.Scan(&raw.Kind, &raw.ID, &raw.InstanceID, &raw.Version, &raw.Data); err != nil {
			return nil, fmt.Errorf("list records: %w", err)
		}
		r, ok := store.DecodeListed(&s.unreadable, raw)
		if ok {
			out = append(out, r)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list records: %w", err)
	}
	return out, nil
}

// Unreadable implements engine.UnreadableReporter.
func (s *Store) Unreadable() []engine.UnreadableRecord { return s.unreadable.List() }

// GetRaw implements store.RawStore.
func (s *Store) GetRaw(ctx context.Context, kind engine.Kind, id string) (store.Raw, error) {
	raw := store.Raw{Kind: kind, ID: id}
	err := s.readers.QueryRowContext(ctx, `SELECT instance_id, version, data FROM records WHERE kind = ? AND id = ?`, kind, id).
		Scan(&raw.InstanceID, &raw.Version, &raw.Data)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Raw{}, fmt.Errorf("get record %s/%s: %w", kind, id, engine.ErrNotFound)
	}
	if err != nil {
		return store.Raw{}, fmt.Errorf("get record %s/%s: %w", kind, id, err)
	}
	return raw, nil
}

// ScanRaw implements store.RawStore.
func (s *Store) ScanRaw(ctx context.Context, fn func(store.Raw) error) error {
	rows, err := s.readers.QueryContext(ctx, `SELECT kind, id, instance_id, version, data FROM records ORDER BY kind, id`)
	if err != nil {
		return fmt.Errorf("scan records: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var raw store.Raw
		if err := rows.Scan(&raw.Kind, &raw.ID, &raw.InstanceID, &raw.Version, &raw.Data); err != nil {
			return fmt.Errorf("scan records: %w", err)
		}
		if err := fn(raw); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("scan records: %w", err)
	}
	return nil
}

func formatTime(t time.Time) string {
	return t.UTC().Format(timeLayout)
}
