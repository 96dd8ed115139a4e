// Package sqlite is the embedded engine.Store: every record in one SQLite
// database file, through the pure-Go driver modernc.org/sqlite, so that
// bucketbroker runs with no database server and no cgo.
//
// Durability comes first. The engine writes its intent before it touches a
// backend and answers a platform only after its write returned, so a write
// that returned must survive a crash of the process, the kernel or the
// power. The database runs in WAL mode with synchronous=FULL: a commit is one
// append to the write-ahead log followed by an fsync of it, and Insert and
// Update return only after that fsync. (In WAL mode synchronous=NORMAL would
// survive a process crash but could lose the last commits on power loss.)
// WAL also lets reads run while a write waits for its fsync.
//
// Correctness under concurrency comes from single statements, never from
// check-then-act. Insert is one INSERT ... ON CONFLICT DO NOTHING: the
// primary key (kind, id) picks the one winner of concurrent duplicates, and
// the others see no row inserted and get engine.ErrExists. Update is one
// UPDATE ... WHERE kind = ? AND id = ? AND version = ?, a compare-and-swap:
// no row changed means engine.ErrStale, or engine.ErrNotFound when a
// follow-up read, made only in that case, finds no record. The table keeps
// the whole record as JSON in its data column; instance_id, resource_name
// (Record.ResourceName, which ListOptions.ByName orders by: the index
// records_resource_name), phase, op_state and the times are copies that
// List selects on. TEXT compares bytewise (the BINARY collation): Go's
// string order.
//
// All writes of a Store go through a pool of exactly one connection, so
// writers in this process queue in database/sql rather than contend for
// SQLite's file lock. Get and List use a separate pool of read-only
// connections. Measured on this code (BenchmarkInsertGet): with one shared
// connection a Get waits behind every queued write and its fsync (about
// 1-2ms instead of tens of microseconds while inserts run); letting several
// connections write turns contention into busy-handler sleeps and made
// parallel inserts several times slower. Writers in other processes, or
// another Store on the same file, wait for the lock for up to busy_timeout
// (10s) or until the caller's context ends, never failing at once with
// "database is locked".
//
// Reads skip what they can prove unchanged. Get keeps the records it
// decoded; a Get that finds the record's version unchanged in the file
// reuses the decoded one instead of decoding the JSON again. It skips the
// statement too while nothing has been committed to the file since that
// record was last found current: every commit, by any connection of any
// process, rewrites the WAL-index header at the start of the -shm file
// (its change counter, last frame and checksums; https://www.sqlite.org/walformat.html),
// which SQLite maps into every process that has the database open and
// which its own readers consult to find the newest commit. The Store maps
// that header read-only too, reads it (both copies, as SQLite's readers
// do) before each statement and stores it with the record, or with the
// fact that there was none; a later Get that finds the same header
// answers from memory, any other goes to the file. The header is read before the statement, so a commit in between
// can only make the stored header older (a needless read later), never
// make an old record look current. A reader connection is held for the
// Store's life, so that SQLite's lock on the -shm file keeps other
// processes from reinitializing it while it is mapped, and the file's
// descriptor stays open until the last Store of this process on that
// database closes (closing any descriptor would drop the process's POSIX
// locks on it). The -shm file mapped is the one SQLite names after the
// database file with symbolic links resolved, as SQLite resolves them; and
// a header that a commit of the Store's own writer leaves as it was is not
// SQLite's (a stale file, an unknown layout), so the Store stops relying
// on it for good. Every writer must use SQLite's shared-memory WAL index,
// the default and what this package sets up: a process that opened the
// file with locking_mode=EXCLUSIVE, which keeps the index in its own
// memory, is not supported beside a running Store.
//
// The schema is versioned. Migrations are an ordered list of SQL scripts;
// schema_migrations records which have run. Open applies the missing ones in
// one transaction that takes the write lock at BEGIN, so two processes
// opening the same file migrate it once, and a failed migration leaves the
// schema as it was. A database whose schema is newer than this binary knows
// is refused, so an older binary never writes records it cannot read.
//
// A database that loses its records must not pass for a new one. Once the
// file holds a schema, Open writes a marker beside it (bucketbroker.db has
// bucketbroker.db.created); a database with no schema (an emptied or
// missing file) whose marker is there is refused with store.ErrLost before
// anything is written, unless opened to start over. A write that finds no
// room (SQLITE_FULL: a full disk, or max_page_count) fails with
// engine.ErrFull, and Writable reports it until a write succeeds, probing
// with a checkpoint that truncates the write-ahead log and a header write
// into a new log, so that the probe needs new space as record writes do.
//
// The file is created with mode 0600 in a directory created with 0700 (the
// WAL and shared-memory files take the mode of the database file; the
// marker is 0600 too): records name buckets, users and access key ids, and
// hold sealed secrets.
package sqlite
