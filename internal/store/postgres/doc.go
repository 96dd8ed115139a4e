// Package postgres is the engine.Store for running several broker replicas
// on one PostgreSQL database, through pgx and its connection pool. It passes
// the same conformance suite (internal/store/storetest) as the embedded
// SQLite store and writes the same record JSON, stamped the same way.
//
// Durability: the engine answers a platform only after its write returned,
// so a returned write must survive a crash of the broker, the server, or a
// failover. A statement returns after its commit is flushed to the WAL
// (synchronous_commit = on). The store's sessions never run with
// synchronous_commit off or local, whatever the server, database or role
// says, unless the DSN sets synchronous_commit itself. Surviving a failover
// also needs the standby to have the commit: synchronous replication, or a
// managed service that promises no loss of committed transactions
// (docs/operations.md).
//
// Correctness under concurrency comes from single statements, never from
// check-then-act, and holds across processes as within one. Insert is one
// INSERT ... ON CONFLICT DO NOTHING: of concurrent inserts of one kind and
// id the primary key admits one, the others wait for its transaction and
// insert nothing (engine.ErrExists). Update is one UPDATE ... WHERE kind =
// $ AND id = $ AND version = $, a compare-and-swap: under READ COMMITTED a
// concurrent update of the same row makes it wait and then re-check the
// version against the row the other wrote, so no row changed means
// engine.ErrStale, or engine.ErrNotFound when a follow-up read, made only
// in that case, finds no record (records are never deleted).
//
// The table keeps the whole record in a json column (json, not jsonb: json
// keeps the text byte for byte, jsonb would rewrite the raw parameters that
// fingerprints are computed over); instance_id, resource_name
// (Record.ResourceName, which ListOptions.ByName orders by), phase,
// op_state and the times are copies that List selects on. kind, id,
// instance_id and resource_name are COLLATE "C", so that List's order is byte order, as the suite requires,
// whatever the database's default collation. Ids must be valid UTF-8
// without NUL characters, which the OSB door already guarantees.
//
// The schema is versioned. Migrations are an ordered list of SQL scripts;
// schema_migrations records which have run. Open applies the missing ones in
// one transaction that first takes a transaction-scoped advisory lock, so
// that replicas starting together migrate once and the others wait and
// find nothing to do; a failed migration leaves the schema as it was. A
// database whose schema is newer than this binary knows is refused. The
// tables live in the first schema of the search_path, which the DSN can
// set (search_path=...) to give a deployment its own schema.
//
// Connections: one pgxpool pool per Store, 10 connections unless the DSN
// sets pool_max_conns; a call waits for the server's fsync far longer than
// it uses a CPU. Every call honors its context, and every call has a
// deadline of the store's own: 3s (callTimeout), or for List 3s without a
// row, whatever the caller's context says. Only a deadline ends a call on a
// server that stopped answering without closing its connections (a frozen
// process, a network partition: no RST, no FIN), since the kernel keeps a
// pooled connection open; pgx then closes that connection. A connection
// attempt gives up after connect_timeout, 5s unless the DSN sets it, even
// without a deadline. Connections idle for more than a second are pinged
// before use, with pool_ping_timeout, 1s unless the DSN sets it: one that
// does not answer is closed and the call tries another, or a new one,
// within its 3s. When the server is down, unreachable or frozen a call fails
// with a connection error or "postgres server did not answer in time",
// never with engine.ErrNotFound, ErrExists or ErrStale, and never with a
// context error while the caller's context is live (the store rewrites its
// own timeouts and pgx's connect timeout, which match
// context.DeadlineExceeded): the engine turns such errors into OSB 503
// within about 3s, and the platform retries. A connection that died (server
// restart, failover, terminated session) fails at most one call before the
// pool replaces it; the pings mean that after a quiet period none fails.
// TestFrozenServer proves this on a real server stopped with SIGSTOP.
//
// A write whose call failed on a lost connection may nevertheless have
// committed. The engine copes, as it does with any retry: a repeated Insert
// gets ErrExists and answers from the stored record, a repeated Update gets
// ErrStale and reads again.
//
// A write the server refuses for want of space (SQLSTATE disk_full) fails
// with engine.ErrFull, and Writable reports it until a write succeeds; its
// probe rewrites a schema_migrations row as it is (a new row version). A
// database with no schema gets one only as OpenWith's store.OpenOptions
// allow: the store keeps no evidence of its own that records were kept, so
// the caller's (the broker's data dir) is all there is.
package postgres
