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
// the whole record as JSON in its data column; instance_id, phase, op_state
// and the times are copies that List selects on.
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
// The schema is versioned. Migrations are an ordered list of SQL scripts;
// schema_migrations records which have run. Open applies the missing ones in
// one transaction that takes the write lock at BEGIN, so two processes
// opening the same file migrate it once, and a failed migration leaves the
// schema as it was. A database whose schema is newer than this binary knows
// is refused, so an older binary never writes records it cannot read.
//
// The file is created with mode 0600 in a directory created with 0700 (the
// WAL and shared-memory files take the mode of the database file): records
// name buckets, users and access key ids, and hold sealed secrets.
package sqlite
